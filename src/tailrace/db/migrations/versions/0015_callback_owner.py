"""Who handed each callback to a worker.

A callback row is ``queued`` once a scheduler hands it to its executor. A local
executor's workers live and die with their scheduler, so a callback a scheduler queued
and then stopped before hearing its end would stay ``queued`` for ever. The scheduler
that queued it is recorded here, and a scheduler that finds its owner gone puts it back
to ``pending`` (as it resets an orphaned try): callbacks run at least once.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01 19:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ADD COLUMN, like 0014's; no foreign key (jobs are cleaned on their own).
    op.add_column("dag_callback", sa.Column("queued_by_job_id", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("dag_callback") as batch:
        batch.drop_column("queued_by_job_id")
