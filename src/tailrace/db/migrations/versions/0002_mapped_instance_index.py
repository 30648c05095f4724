"""An index for reading a mapped task's instances by state, in map-index order.

A run with a million ``.iterate()`` instances is planned a page at a time: the unstarted
instances of a task, the first unfinished one, counts by state. Each of these is a range
of this index instead of a scan over the task's instances.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 06:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_task_instance_run_task_state",
        "task_instance",
        ["dag_run_id", "task_id", "state", "map_index"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index("ix_task_instance_run_task_state", table_name="task_instance")
