"""Versions of a run's unmapped instances on PostgreSQL too (ADR 0052): the scheduler's
pass keeps a run's unmapped instances between steps there as it does on SQLite.

A change of an unmapped instance (map_index -1) in a column the pass reads, or its
insert, stamps the row's ``task_instance.row_version`` with the writing transaction's id
(``pg_current_xact_id()``); an unmapped instance leaving the run (deleted, or expanded
into map_index 0) stamps ``dag_run.ti_reload_version`` the same way. A pass remembers
the snapshot it read a run in: a row whose stamp that snapshot does not see changed
since, and is read back; a reload stamp it does not see means reading the run whole.
Transaction ids, unlike a counter, need no lock on the run's row, so reports never
queue behind a pass; a snapshot, unlike "the largest version read", never misses a
transaction that committed after a later one.

Both columns become BIGINT on PostgreSQL (transaction ids outgrow 32 bits). SQLite is
unchanged: migration 0018's triggers keep its versions.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07 20:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | Sequence[str] | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The task_instance columns the scheduler's pass reads (tailrace.scheduler._pass
# _TI_COLUMNS), as migration 0018 watches them on SQLite.
WATCHED_COLUMNS = (
    "dag_run_id",
    "task_id",
    "map_index",
    "state",
    "try_number",
    "max_tries",
    "next_retry_at",
    "next_method",
)

_CHANGED = " OR ".join(f"OLD.{c} IS DISTINCT FROM NEW.{c}" for c in WATCHED_COLUMNS)
FUNCTIONS = {
    "tailrace_ti_unmapped_stamp": """
        BEGIN
            NEW.row_version := pg_current_xact_id()::text::bigint;
            RETURN NEW;
        END
    """,
    "tailrace_ti_unmapped_left": """
        BEGIN
            UPDATE dag_run SET ti_reload_version = pg_current_xact_id()::text::bigint
            WHERE id = OLD.dag_run_id;
            RETURN NULL;
        END
    """,
}
TRIGGERS = {
    "ti_unmapped_added": (
        "BEFORE INSERT ON task_instance FOR EACH ROW WHEN (NEW.map_index = -1) "
        "EXECUTE FUNCTION tailrace_ti_unmapped_stamp()"
    ),
    "ti_unmapped_changed": (
        f"BEFORE UPDATE OF {', '.join(WATCHED_COLUMNS)} ON task_instance FOR EACH ROW "
        f"WHEN (NEW.map_index = -1 AND ({_CHANGED})) "
        "EXECUTE FUNCTION tailrace_ti_unmapped_stamp()"
    ),
    "ti_unmapped_left": (
        "AFTER UPDATE OF map_index ON task_instance FOR EACH ROW "
        "WHEN (OLD.map_index = -1 AND NEW.map_index <> -1) "
        "EXECUTE FUNCTION tailrace_ti_unmapped_left()"
    ),
    "ti_unmapped_removed": (
        "AFTER DELETE ON task_instance FOR EACH ROW WHEN (OLD.map_index = -1) "
        "EXECUTE FUNCTION tailrace_ti_unmapped_left()"
    ),
}
_STAMPED = (("task_instance", "row_version"), ("dag_run", "ti_reload_version"))


def upgrade() -> None:
    dialect = op.get_bind().dialect
    if dialect.name != "postgresql":
        return
    if dialect.server_version_info is not None and dialect.server_version_info < (13,):
        found = ".".join(str(n) for n in dialect.server_version_info)
        raise RuntimeError(
            f"Tailrace needs PostgreSQL 13 or later (its scheduler stamps rows with "
            f"pg_current_xact_id(), ADR 0052); this server is {found}. Upgrade PostgreSQL, "
            "then run `tailrace db migrate` again."
        )
    for table, column in _STAMPED:
        op.alter_column(table, column, type_=sa.BigInteger(), existing_nullable=False)
    for name, body in FUNCTIONS.items():
        op.execute(
            f"CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $${body}$$"
        )
    for name, body in TRIGGERS.items():
        op.execute(f"CREATE TRIGGER {name} {body}")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for name in TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {name} ON task_instance")
    for name in FUNCTIONS:
        op.execute(f"DROP FUNCTION IF EXISTS {name}()")
    for table, column in _STAMPED:
        op.execute(f"UPDATE {table} SET {column} = 0")
        op.alter_column(table, column, type_=sa.Integer(), existing_nullable=False)
