"""Join the migrations written side by side in stop 13 into one head.

Each of them starts from 0004 and touches tables of its own (or columns the others do
not), so the order Alembic applies them in does not matter.

Revision ID: 0005
Revises: events_1, harness_1, names_1, schedparity_1, streamlog_1, traces_1, workers_1
"""

from __future__ import annotations

from collections.abc import Sequence

revision: str = "0005"
down_revision: str | Sequence[str] | None = (
    "events_1",
    "harness_1",
    "names_1",
    "schedparity_1",
    "streamlog_1",
    "traces_1",
    "workers_1",
)
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
