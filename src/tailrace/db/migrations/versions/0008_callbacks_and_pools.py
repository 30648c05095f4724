"""DAG callbacks waiting for a worker, pools, and what dispatch orders and counts by.

A finished run whose DAG has ``on_success_callback`` / ``on_failure_callback`` leaves a
``dag_callback`` row in the transaction that finished it; the scheduler hands it to a
worker. ``pool`` holds Airflow's pools (``default_pool`` is created by the scheduler with
``default_pool_slots``); each task instance records its pool, the slots it takes and its
effective priority weight, so dispatch counts and orders without reading the DAG.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 13:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "dag_callback",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("dag_run_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("reason", sa.String(length=50), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("queued_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["dag_run_id"],
            ["dag_run.id"],
            name=op.f("fk_dag_callback_dag_run_id_dag_run"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dag_callback")),
    )
    op.create_index(op.f("ix_dag_callback_state"), "dag_callback", ["state"])
    op.create_table(
        "pool",
        sa.Column("name", sa.String(length=250), nullable=False),
        sa.Column("slots", sa.Integer(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("include_deferred", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_pool")),
    )
    # Plain ADD COLUMNs (SQLite has them): batch mode would copy the table.
    op.add_column(
        "task_instance",
        sa.Column("pool", sa.String(length=250), nullable=False, server_default="default_pool"),
    )
    op.add_column(
        "task_instance",
        sa.Column("pool_slots", sa.Integer(), nullable=False, server_default="1"),
    )
    op.add_column(
        "task_instance",
        sa.Column("priority_weight", sa.Integer(), nullable=False, server_default="1"),
    )


def downgrade() -> None:
    with op.batch_alter_table("task_instance") as batch:
        batch.drop_column("priority_weight")
        batch.drop_column("pool_slots")
        batch.drop_column("pool")
    op.drop_table("pool")
    op.drop_index(op.f("ix_dag_callback_state"), table_name="dag_callback")
    op.drop_table("dag_callback")
