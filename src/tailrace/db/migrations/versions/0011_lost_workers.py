"""Which Celery worker runs a try, and how many tries an instance lost with its workers.

A scheduler hears the Celery workers' heartbeats through the broker; when one goes
silent, the tries it was running (``worker_name``) are lost at once and run again
without costing a retry, at most ``lost_try_requeues`` times (``lost_tries``) (ADR 0024).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01 13:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("task_instance") as batch:
        batch.add_column(sa.Column("worker_name", sa.String(length=250), nullable=True))
        batch.add_column(sa.Column("lost_tries", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("task_instance") as batch:
        batch.drop_column("lost_tries")
        batch.drop_column("worker_name")
