"""Deadline alerts (Airflow 3.1's DeadlineAlert): one row per run and alert, holding when
the run must have finished by; a missed one records how its callback was handed on (a
``dag_callback`` row for a worker, or a trigger for the triggerer) and, for the
triggerer's, how it ended.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-01 20:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "deadline",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("dag_run_id", sa.Integer(), nullable=False),
        sa.Column("alert_index", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=250), nullable=True),
        sa.Column("deadline_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("missed", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("missed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("dag_callback_id", sa.Integer(), nullable=True),
        sa.Column("trigger_id", sa.Integer(), nullable=True),
        sa.Column("callback_state", sa.String(length=20), nullable=True),
        sa.Column("callback_error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["dag_run_id"],
            ["dag_run.id"],
            name=op.f("fk_deadline_dag_run_id_dag_run"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deadline")),
    )
    op.create_index("ix_deadline_dag_run_id", "deadline", ["dag_run_id"])
    op.create_index("ix_deadline_missed_deadline_time", "deadline", ["missed", "deadline_time"])
    op.create_index("ix_deadline_dag_callback_id", "deadline", ["dag_callback_id"])
    op.create_index("ix_deadline_trigger_id", "deadline", ["trigger_id"])


def downgrade() -> None:
    op.drop_table("deadline")
