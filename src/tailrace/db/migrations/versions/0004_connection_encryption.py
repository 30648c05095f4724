"""Connections encrypted at rest with Fernet (Airflow's ``fernet_key``).

Rows written before this revision stay plain text (``is_encrypted`` false) and keep
working; ``tailrace rotate-fernet-key`` encrypts them, and new and replaced rows are
encrypted as they are written.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ADD COLUMN (SQLite has it): batch mode would copy the table, and could
    # not in `db migrate --sql`.
    op.add_column(
        "connection",
        sa.Column("is_encrypted", sa.Boolean(), nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    # A schema before 0004 reads every URI as plain text: it cannot use encrypted rows.
    encrypted = op.get_bind().scalar(sa.text("SELECT count(*) FROM connection WHERE is_encrypted"))
    if encrypted:
        raise RuntimeError(
            f"{encrypted} connections are encrypted, and a schema before revision 0004 "
            "cannot read them; delete them (tailrace connections delete) and add them "
            "again after the downgrade"
        )
    with op.batch_alter_table("connection") as batch:
        batch.drop_column("is_encrypted")
