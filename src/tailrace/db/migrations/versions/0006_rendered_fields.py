"""A try's templated fields as rendered (``rendered_task_instance_fields``, as Airflow).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 13:20:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "rendered_task_instance_fields",
        sa.Column(
            "task_instance_id",
            sa.Integer(),
            sa.ForeignKey("task_instance.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("try_number", sa.Integer(), primary_key=True),
        sa.Column("rendered_fields", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("rendered_task_instance_fields")
