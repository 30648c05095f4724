"""Versions of a run's unmapped instances, kept by SQLite itself (ADR 0046): the
scheduler's pass keeps a run's unmapped instances between steps and reads back only the
rows that changed.

``dag_run.ti_version`` moves with every change of one of the run's unmapped instances
(map_index -1) in a column the pass reads; the changed row takes the new version as its
``task_instance.row_version``. ``dag_run.ti_reload_version`` is the version at which an
unmapped instance left the run (deleted, or expanded into map_index 0): a pass that kept
the rows of an older version reads them all again. Triggers keep the three, so no writer
(the scheduler, the api-server, the triggerer, the CLI, a person with ``sqlite3``) can
change an instance without moving them. They exist on SQLite only: its one write lock
makes a version read in a write transaction final until that transaction ends. On
PostgreSQL the columns stayed 0 and the pass read every step, until migration 0019
stamped them with transaction ids (ADR 0052).

A later migration that recreates ``task_instance`` or ``dag_run`` on SQLite (batch mode)
drops these triggers and must create them again (``create_triggers``);
``tests/scheduler/test_kept_runs.py`` fails if they are missing at head.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-03 13:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | Sequence[str] | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The task_instance columns the scheduler's pass reads (tailrace.scheduler._pass
# _TI_COLUMNS): a change to any other (a heartbeat, a log's upkeep) moves nothing.
WATCHED_COLUMNS = (
    "dag_run_id",
    "task_id",
    "map_index",
    "state",
    "try_number",
    "max_tries",
    "next_retry_at",
    "next_method",
)

_BUMP = """
    UPDATE dag_run SET ti_version = ti_version + 1 WHERE id = NEW.dag_run_id;
    UPDATE task_instance SET row_version =
        (SELECT ti_version FROM dag_run WHERE id = NEW.dag_run_id)
    WHERE id = NEW.id;
"""
_RELOAD = """
    UPDATE dag_run SET ti_version = ti_version + 1, ti_reload_version = ti_version + 1
    WHERE id = OLD.dag_run_id;
"""
TRIGGERS = {
    "ti_unmapped_added": f"AFTER INSERT ON task_instance WHEN NEW.map_index = -1 BEGIN {_BUMP} END",
    "ti_unmapped_changed": (
        f"AFTER UPDATE OF {', '.join(WATCHED_COLUMNS)} ON task_instance "
        f"WHEN NEW.map_index = -1 BEGIN {_BUMP} END"
    ),
    "ti_unmapped_left": (
        "AFTER UPDATE OF map_index ON task_instance "
        f"WHEN OLD.map_index = -1 AND NEW.map_index != -1 BEGIN {_RELOAD} END"
    ),
    "ti_unmapped_removed": (
        f"AFTER DELETE ON task_instance WHEN OLD.map_index = -1 BEGIN {_RELOAD} END"
    ),
}


def create_triggers() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for name, body in TRIGGERS.items():
        op.execute(f"CREATE TRIGGER {name} {body}")


def upgrade() -> None:
    op.add_column(
        "dag_run", sa.Column("ti_version", sa.Integer(), server_default="0", nullable=False)
    )
    op.add_column(
        "dag_run",
        sa.Column("ti_reload_version", sa.Integer(), server_default="0", nullable=False),
    )
    op.add_column(
        "task_instance",
        sa.Column("row_version", sa.Integer(), server_default="0", nullable=False),
    )
    # The pass reads a run's unmapped rows changed since a version: one index range.
    op.drop_index("ix_task_instance_run_map_index", table_name="task_instance")
    op.create_index(
        "ix_task_instance_run_map_index",
        "task_instance",
        ["dag_run_id", "map_index", "row_version"],
        unique=False,
    )
    create_triggers()


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for name in TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
    op.drop_index("ix_task_instance_run_map_index", table_name="task_instance")
    op.create_index(
        "ix_task_instance_run_map_index", "task_instance", ["dag_run_id", "map_index"], unique=False
    )
    with op.batch_alter_table("task_instance") as batch:
        batch.drop_column("row_version")
    with op.batch_alter_table("dag_run") as batch:
        batch.drop_column("ti_reload_version")
        batch.drop_column("ti_version")
