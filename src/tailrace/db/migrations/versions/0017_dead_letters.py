"""Dead letters: the trigger events of a batch whose handling failed every try of a task
with ``stream_retry="dead_letter"``, each with the message's id and the error, kept
beside the run (they go with its task instance); found by message id when a queue
trigger copies them to its broker's dead letters.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02 14:15:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "dead_letter",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("task_instance_id", sa.Integer(), nullable=False),
        sa.Column("dag_id", sa.String(length=250), nullable=False),
        sa.Column("run_id", sa.String(length=250), nullable=False),
        sa.Column("task_id", sa.String(length=250), nullable=False),
        sa.Column("map_index", sa.Integer(), nullable=False),
        sa.Column("try_number", sa.Integer(), nullable=False),
        sa.Column("trigger_id", sa.Integer(), nullable=False),
        sa.Column("sequence_index", sa.BigInteger(), nullable=False),
        sa.Column("dedup_key", sa.String(length=512), nullable=True),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_instance_id"],
            ["task_instance.id"],
            name=op.f("fk_dead_letter_task_instance_id_task_instance"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dead_letter")),
    )
    op.create_index("ix_dead_letter_task_instance_id", "dead_letter", ["task_instance_id"])
    op.create_index("ix_dead_letter_dag_id_id", "dead_letter", ["dag_id", "id"])
    op.create_index(
        "ix_dead_letter_trigger_id_dedup_key", "dead_letter", ["trigger_id", "dedup_key"]
    )


def downgrade() -> None:
    op.drop_table("dead_letter")
