"""Task callbacks for tries that end without a worker.

A try that ends in the scheduler — its deferral timed out, its trigger failed or
finished a ``start_from_trigger`` task, its worker was lost — has had no worker to call
the task's ``on_failure_callback`` / ``on_retry_callback`` / ``on_success_callback``. The
scheduler records one in ``dag_callback`` (a row naming the task instance and its try),
and a worker runs it as it runs a DAG's callbacks (ADR 0033).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01 16:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMNs: no table rebuild, and `db migrate --sql` prints them without a
    # live database. No foreign key (SQLite cannot add one to a table in place): a row
    # goes with its run (dag_run_id cascades), and instances are deleted only with runs.
    op.add_column("dag_callback", sa.Column("task_instance_id", sa.Integer(), nullable=True))
    op.add_column("dag_callback", sa.Column("try_number", sa.Integer(), nullable=True))
    op.add_column("dag_callback", sa.Column("task_error", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("dag_callback") as batch:
        batch.drop_column("task_error")
        batch.drop_column("try_number")
        batch.drop_column("task_instance_id")
