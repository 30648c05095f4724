"""Streams as a durable log: pruning watermark, retention, replays.

``trigger.pruned_sequence`` is the highest sequence index whose events were deleted after
their acknowledgement (a re-yielded event at or below it is dropped, as the unique key
drops one still stored); ``stream.items_removed_at`` says when retention (or ``db clean``)
removed a finished stream's items; ``dag.stream_retention`` is a DAG's own retention in
seconds; ``dag_run.replay_of`` names the run whose stream a replay run reads.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("trigger") as batch:
        batch.add_column(
            sa.Column("pruned_sequence", sa.BigInteger(), nullable=False, server_default="-1")
        )
    with op.batch_alter_table("stream") as batch:
        batch.add_column(sa.Column("items_removed_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("dag") as batch:
        batch.add_column(sa.Column("stream_retention", sa.Float(), nullable=True))
    with op.batch_alter_table("dag_run") as batch:
        batch.add_column(sa.Column("replay_of", sa.String(length=250), nullable=True))
    op.create_index("ix_dag_run_end_date", "dag_run", ["end_date"])


def downgrade() -> None:
    op.drop_index("ix_dag_run_end_date", table_name="dag_run")
    with op.batch_alter_table("dag_run") as batch:
        batch.drop_column("replay_of")
    with op.batch_alter_table("dag") as batch:
        batch.drop_column("stream_retention")
    with op.batch_alter_table("stream") as batch:
        batch.drop_column("items_removed_at")
    with op.batch_alter_table("trigger") as batch:
        batch.drop_column("pruned_sequence")
