"""Backfills, as in Airflow 3: a backfill, the logical dates it covers (with the run each
got, or why none), and on each run the backfill that created it. Human-in-the-loop
requests and responses (Airflow 3.1's hitl_detail).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01 16:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "backfill",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("dag_id", sa.String(length=250), nullable=False),
        sa.Column("from_date", sa.DateTime(timezone=True), nullable=False),
        sa.Column("to_date", sa.DateTime(timezone=True), nullable=False),
        sa.Column("dag_run_conf", sa.JSON(), nullable=False),
        sa.Column("is_paused", sa.Boolean(), nullable=False),
        sa.Column("reprocess_behavior", sa.String(length=20), nullable=False),
        sa.Column("max_active_runs", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("triggering_user_name", sa.String(length=250), nullable=True),
        sa.ForeignKeyConstraint(
            ["dag_id"], ["dag.dag_id"], name=op.f("fk_backfill_dag_id_dag"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_backfill")),
    )
    op.create_index("ix_backfill_dag_id", "backfill", ["dag_id"])
    op.create_table(
        "backfill_dag_run",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("backfill_id", sa.Integer(), nullable=False),
        sa.Column("dag_run_id", sa.Integer(), nullable=True),
        sa.Column("exception_reason", sa.String(length=50), nullable=True),
        sa.Column("logical_date", sa.DateTime(timezone=True), nullable=False),
        sa.Column("sort_ordinal", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["backfill_id"],
            ["backfill.id"],
            name=op.f("fk_backfill_dag_run_backfill_id_backfill"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["dag_run_id"],
            ["dag_run.id"],
            name=op.f("fk_backfill_dag_run_dag_run_id_dag_run"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_backfill_dag_run")),
        sa.UniqueConstraint(
            "backfill_id", "dag_run_id", name=op.f("uq_backfill_dag_run_backfill_id_dag_run_id")
        ),
    )
    op.create_index("ix_backfill_dag_run_dag_run_id", "backfill_dag_run", ["dag_run_id"])
    # A plain ADD COLUMN (SQLite has it): batch mode would copy the table.
    op.add_column("dag_run", sa.Column("backfill_id", sa.Integer(), nullable=True))
    op.create_table(
        "hitl_detail",
        sa.Column("ti_id", sa.Integer(), nullable=False),
        sa.Column("subject", sa.Text(), nullable=False),
        sa.Column("body", sa.Text(), nullable=True),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("defaults", sa.JSON(), nullable=True),
        sa.Column("multiple", sa.Boolean(), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("responded_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("responded_by", sa.String(length=250), nullable=True),
        sa.Column("chosen_options", sa.JSON(), nullable=True),
        sa.Column("params_input", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(
            ["ti_id"],
            ["task_instance.id"],
            name=op.f("fk_hitl_detail_ti_id_task_instance"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("ti_id", name=op.f("pk_hitl_detail")),
    )


def downgrade() -> None:
    op.drop_table("hitl_detail")
    with op.batch_alter_table("dag_run") as batch:
        batch.drop_column("backfill_id")
    op.drop_index("ix_backfill_dag_run_dag_run_id", table_name="backfill_dag_run")
    op.drop_table("backfill_dag_run")
    op.drop_index("ix_backfill_dag_id", table_name="backfill")
    op.drop_table("backfill")
