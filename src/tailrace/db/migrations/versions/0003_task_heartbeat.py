"""A remote worker's last word about the try it runs.

Celery workers heartbeat each running task through the execution API; a running instance
whose worker went silent for ``task_heartbeat_timeout`` has lost its try, whichever
scheduler queued it.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 08:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("task_instance") as batch:
        batch.add_column(sa.Column("last_heartbeat_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("task_instance") as batch:
        batch.drop_column("last_heartbeat_at")
