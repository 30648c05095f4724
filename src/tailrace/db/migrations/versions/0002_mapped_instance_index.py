"""Indexes for planning a run with a million mapped instances a page at a time.

By ``(dag_run_id, task_id, state, map_index)``: a mapped task's unstarted and started
instances, its first unfinished one, which outcomes exist. By ``(dag_run_id, map_index)``:
a run's unmapped instances and placeholders (``map_index = -1``). Each is a range of an
index instead of a scan over the run's instances.

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
    op.create_index(
        "ix_task_instance_run_map_index",
        "task_instance",
        ["dag_run_id", "map_index"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index("ix_task_instance_run_map_index", table_name="task_instance")
    op.drop_index("ix_task_instance_run_task_state", table_name="task_instance")
