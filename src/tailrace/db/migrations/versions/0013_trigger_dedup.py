"""Queue events are pruned like any other: a redelivery is recognised by a dedup record.

``trigger_dedup`` holds (trigger, message id, sequence index, committed at) of each event
that carried a ``dedup_key``, kept for the redelivery window after its acknowledgement
(``trigger.dedup_mark_sequence`` / ``dedup_mark_at`` are that window's clock), so the
events themselves no longer need to stay (ADR 0032). The records of stored events are
copied over; the unique index on ``trigger_event (trigger_id, dedup_key)`` goes.

Two foreign keys `db clean` deletes through get their indexes (SQLite looks each deleted
parent's children up): ``dag_callback.dag_run_id`` and ``asset_event.source_trigger_id``.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01 16:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "trigger_dedup",
        sa.Column("trigger_id", sa.Integer(), nullable=False),
        sa.Column("sequence_index", sa.BigInteger(), nullable=False),
        sa.Column("dedup_key", sa.String(length=512), nullable=False),
        sa.Column("committed_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["trigger_id"],
            ["trigger.id"],
            name=op.f("fk_trigger_dedup_trigger_id_trigger"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("trigger_id", "sequence_index", name=op.f("pk_trigger_dedup")),
    )
    op.create_index(
        "uq_trigger_dedup_trigger_id_dedup_key",
        "trigger_dedup",
        ["trigger_id", "dedup_key"],
        unique=True,
    )
    op.execute(
        "INSERT INTO trigger_dedup (trigger_id, sequence_index, dedup_key, committed_at) "
        "SELECT trigger_id, sequence_index, dedup_key, created_at FROM trigger_event "
        "WHERE dedup_key IS NOT NULL"
    )
    op.drop_index("uq_trigger_event_trigger_id_dedup_key", table_name="trigger_event")
    op.create_index(op.f("ix_dag_callback_dag_run_id"), "dag_callback", ["dag_run_id"])
    op.create_index(op.f("ix_asset_event_source_trigger_id"), "asset_event", ["source_trigger_id"])
    # Plain nullable ADD COLUMNs: SQLite adds them without copying the table.
    op.add_column("trigger", sa.Column("dedup_mark_sequence", sa.BigInteger(), nullable=True))
    op.add_column("trigger", sa.Column("dedup_mark_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_index(op.f("ix_asset_event_source_trigger_id"), table_name="asset_event")
    op.drop_index(op.f("ix_dag_callback_dag_run_id"), table_name="dag_callback")
    with op.batch_alter_table("trigger") as batch:
        batch.drop_column("dedup_mark_at")
        batch.drop_column("dedup_mark_sequence")
    # Pruned queue events cannot come back; the index only needs the stored ones unique.
    op.create_index(
        "uq_trigger_event_trigger_id_dedup_key",
        "trigger_event",
        ["trigger_id", "dedup_key"],
        unique=True,
    )
    op.drop_index("uq_trigger_dedup_trigger_id_dedup_key", table_name="trigger_dedup")
    op.drop_table("trigger_dedup")
