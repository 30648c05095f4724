"""Trace context on triggers, and the run timeline's segments.

``trigger.traceparent`` carries the W3C trace context of the span that deferred, so a
triggerer's trigger run joins its DAG run's trace. ``task_timeline`` keeps each state
change of a task instance (and each batch of trigger events handed to it) with its
time: the run page's Gantt draws queued, running and deferred segments from it.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01 13:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("trigger", sa.Column("traceparent", sa.String(64), nullable=True))
    op.create_table(
        "task_timeline",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column(
            "task_instance_id",
            sa.Integer(),
            sa.ForeignKey(
                "task_instance.id",
                ondelete="CASCADE",
                name="fk_task_timeline_task_instance_id_task_instance",
            ),
            nullable=False,
        ),
        sa.Column(
            "dag_run_id",
            sa.Integer(),
            sa.ForeignKey(
                "dag_run.id", ondelete="CASCADE", name="fk_task_timeline_dag_run_id_dag_run"
            ),
            nullable=False,
        ),
        sa.Column("try_number", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("state", sa.String(20), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_task_timeline"),
    )
    op.create_index("ix_task_timeline_dag_run_id", "task_timeline", ["dag_run_id"])
    op.create_index("ix_task_timeline_task_instance_id", "task_timeline", ["task_instance_id"])


def downgrade() -> None:
    op.drop_index("ix_task_timeline_task_instance_id", table_name="task_timeline")
    op.drop_index("ix_task_timeline_dag_run_id", table_name="task_timeline")
    op.drop_table("task_timeline")
    with op.batch_alter_table("trigger") as batch:
        batch.drop_column("traceparent")
