"""Assets: assets and aliases, their events, the queue of events DAGs wait on, the
events each run was started by, which DAG names which asset, and asset watchers.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 13:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "asset",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=1500), nullable=False),
        sa.Column("uri", sa.String(length=1500), nullable=False),
        sa.Column("group", sa.String(length=250), nullable=False),
        sa.Column("extra", sa.JSON(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_asset")),
        sa.UniqueConstraint("name", name=op.f("uq_asset_name")),
        sa.UniqueConstraint("uri", name=op.f("uq_asset_uri")),
    )
    op.create_table(
        "asset_alias",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=1500), nullable=False),
        sa.Column("group", sa.String(length=250), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_asset_alias")),
        sa.UniqueConstraint("name", name=op.f("uq_asset_alias_name")),
    )
    op.create_table(
        "asset_alias_asset",
        sa.Column("alias_id", sa.Integer(), nullable=False),
        sa.Column("asset_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["alias_id"],
            ["asset_alias.id"],
            name=op.f("fk_asset_alias_asset_alias_id_asset_alias"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["asset_id"],
            ["asset.id"],
            name=op.f("fk_asset_alias_asset_asset_id_asset"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("alias_id", "asset_id", name=op.f("pk_asset_alias_asset")),
    )
    op.create_index(
        op.f("ix_asset_alias_asset_asset_id"), "asset_alias_asset", ["asset_id"], unique=False
    )
    op.create_table(
        "asset_event",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("asset_id", sa.Integer(), nullable=False),
        sa.Column("extra", sa.JSON(), nullable=False),
        sa.Column("timestamp", _TS, nullable=False),
        sa.Column("source_dag_id", sa.String(length=250), nullable=True),
        sa.Column("source_task_id", sa.String(length=250), nullable=True),
        sa.Column("source_run_id", sa.String(length=250), nullable=True),
        sa.Column("source_map_index", sa.Integer(), nullable=False),
        sa.Column("source_alias_name", sa.String(length=1500), nullable=True),
        sa.Column("source_trigger_id", sa.Integer(), nullable=True),
        sa.Column("dedup_key", sa.String(length=512), nullable=True),
        sa.ForeignKeyConstraint(
            ["asset_id"],
            ["asset.id"],
            name=op.f("fk_asset_event_asset_id_asset"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["source_trigger_id"],
            ["trigger.id"],
            name=op.f("fk_asset_event_source_trigger_id_trigger"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_asset_event")),
        sa.UniqueConstraint("dedup_key", name=op.f("uq_asset_event_dedup_key")),
    )
    op.create_index("ix_asset_event_asset_id_id", "asset_event", ["asset_id", "id"], unique=False)
    op.create_table(
        "asset_dag_run_queue",
        sa.Column("event_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("target_dag_id", sa.String(length=250), nullable=False),
        sa.Column("asset_id", sa.Integer(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["event_id"],
            ["asset_event.id"],
            name=op.f("fk_asset_dag_run_queue_event_id_asset_event"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["target_dag_id"],
            ["dag.dag_id"],
            name=op.f("fk_asset_dag_run_queue_target_dag_id_dag"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["asset_id"],
            ["asset.id"],
            name=op.f("fk_asset_dag_run_queue_asset_id_asset"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("event_id", "target_dag_id", name=op.f("pk_asset_dag_run_queue")),
    )
    op.create_index(
        op.f("ix_asset_dag_run_queue_target_dag_id"),
        "asset_dag_run_queue",
        ["target_dag_id"],
        unique=False,
    )
    op.create_table(
        "dag_run_asset_event",
        sa.Column("dag_run_id", sa.Integer(), nullable=False),
        sa.Column("event_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.ForeignKeyConstraint(
            ["dag_run_id"],
            ["dag_run.id"],
            name=op.f("fk_dag_run_asset_event_dag_run_id_dag_run"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["event_id"],
            ["asset_event.id"],
            name=op.f("fk_dag_run_asset_event_event_id_asset_event"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("dag_run_id", "event_id", name=op.f("pk_dag_run_asset_event")),
    )
    op.create_index(
        op.f("ix_dag_run_asset_event_event_id"), "dag_run_asset_event", ["event_id"], unique=False
    )
    op.create_table(
        "asset_reference",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("dag_id", sa.String(length=250), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("task_id", sa.String(length=250), nullable=True),
        sa.Column("asset_id", sa.Integer(), nullable=True),
        sa.Column("alias_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["dag_id"],
            ["dag.dag_id"],
            name=op.f("fk_asset_reference_dag_id_dag"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["asset_id"],
            ["asset.id"],
            name=op.f("fk_asset_reference_asset_id_asset"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["alias_id"],
            ["asset_alias.id"],
            name=op.f("fk_asset_reference_alias_id_asset_alias"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_asset_reference")),
    )
    for column in ("dag_id", "asset_id", "alias_id"):
        op.create_index(
            op.f(f"ix_asset_reference_{column}"), "asset_reference", [column], unique=False
        )
    op.create_table(
        "asset_watcher",
        sa.Column("asset_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=250), nullable=False),
        sa.Column("trigger_id", sa.Integer(), nullable=False),
        sa.Column("dag_id", sa.String(length=250), nullable=False),
        sa.ForeignKeyConstraint(
            ["asset_id"],
            ["asset.id"],
            name=op.f("fk_asset_watcher_asset_id_asset"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["dag_id"],
            ["dag.dag_id"],
            name=op.f("fk_asset_watcher_dag_id_dag"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["trigger_id"],
            ["trigger.id"],
            name=op.f("fk_asset_watcher_trigger_id_trigger"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("asset_id", "name", name=op.f("pk_asset_watcher")),
    )
    op.create_index(
        op.f("ix_asset_watcher_trigger_id"), "asset_watcher", ["trigger_id"], unique=False
    )

    # A plain ADD COLUMN and a unique index (SQLite has both without copying the table).
    op.add_column("trigger_event", sa.Column("dedup_key", sa.String(length=512), nullable=True))
    op.create_index(
        "uq_trigger_event_trigger_id_dedup_key",
        "trigger_event",
        ["trigger_id", "dedup_key"],
        unique=True,
    )


def downgrade() -> None:
    op.drop_index("uq_trigger_event_trigger_id_dedup_key", table_name="trigger_event")
    with op.batch_alter_table("trigger_event") as batch:
        batch.drop_column("dedup_key")
    for table in (
        "asset_watcher",
        "asset_reference",
        "dag_run_asset_event",
        "asset_dag_run_queue",
        "asset_event",
        "asset_alias_asset",
        "asset_alias",
        "asset",
    ):
        op.drop_table(table)
