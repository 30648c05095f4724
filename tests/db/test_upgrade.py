"""The upgrade path: `tailrace db migrate` from every earlier revision keeps every row.

Each earlier revision (discovered from the migrations, not listed here) gets a database
filled with rows in every table as that revision's schema has them; the CLI migrates it,
and every row must read back with the same values.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Engine

from tailrace.db import create_engine, current_revision, upgrade
from tailrace.db.migrate import alembic_config, head_revision
from tailrace.testing import run_cli

# Oldest first.
REVISIONS = [
    script.revision
    for script in reversed(list(ScriptDirectory.from_config(alembic_config()).walk_revisions()))
]
EARLIER = REVISIONS[:-1]
ROWS_PER_TABLE = 2
WHEN = datetime(2026, 3, 14, 15, 9, 26, 535897, tzinfo=UTC)

Rows = dict[str, list[dict[str, Any]]]


@pytest.fixture
def empty_engine(empty_database_url: str) -> Iterator[Engine]:
    engine = create_engine(empty_database_url)
    yield engine
    engine.dispose()


def migrate_cli(database_url: str, *args: str) -> str:
    out = run_cli({**os.environ, "TAILRACE_DATABASE_URL": database_url}, "db", "migrate", *args)
    assert out.returncode == 0, out.stderr
    return out.stdout


def schema(engine: Engine) -> sa.MetaData:
    metadata = sa.MetaData()
    metadata.reflect(engine)
    metadata.remove(metadata.tables["alembic_version"])
    return metadata


def representative(table: sa.Table, column: sa.Column[Any], i: int, rows: Rows) -> Any:
    """A value for row ``i`` of ``column``: distinct per row, with the awkward parts
    (unicode, quotes, microseconds, integers past 32 bits, nested JSON) a real one has."""
    for foreign_key in column.foreign_keys:
        parent = foreign_key.column
        return rows[parent.table.name][i][parent.name]
    kind = column.type
    if isinstance(kind, sa.Boolean):
        return i % 2 == 0
    if isinstance(kind, sa.BigInteger):
        return 2**40 + i
    if isinstance(kind, sa.Integer):
        return i + 1
    if isinstance(kind, sa.Float):
        return 1.25 + i
    if isinstance(kind, sa.DateTime):
        return WHEN + timedelta(minutes=i)
    if isinstance(kind, sa.JSON):
        return {"row": i, "text": 'naïve "quoted" ✓', "items": [1, 2.5, None, True, {"k": []}]}
    if isinstance(kind, sa.String):
        return f"{i}:{table.name}.{column.name} 'ü' ✓"[: kind.length]
    if isinstance(kind, sa.LargeBinary):
        return bytes(range(i, i + 16))
    raise AssertionError(
        f"no representative value for {table.name}.{column.name} of type {kind!r}: "
        "teach representative() the type"
    )


def fill(engine: Engine, metadata: sa.MetaData) -> None:
    """ROWS_PER_TABLE rows in every table, parents first, every column set."""
    rows: Rows = {}
    with engine.begin() as connection:
        for table in metadata.sorted_tables:
            rows[table.name] = []
            for i in range(ROWS_PER_TABLE):
                row: dict[str, Any] = {}
                for column in table.columns:
                    row[column.name] = representative(table, column, i, rows)
                rows[table.name].append(row)
            connection.execute(table.insert(), rows[table.name])


def read(engine: Engine, metadata: sa.MetaData) -> Rows:
    """Every row of ``metadata``'s tables, only the columns it names, in key order."""
    current = schema(engine)
    out: Rows = {}
    with engine.connect() as connection:
        for name, table in metadata.tables.items():
            now = current.tables[name]
            columns = [now.c[column.name] for column in table.columns]
            order = [now.c[column.name] for column in table.primary_key.columns]
            result = connection.execute(sa.select(*columns).order_by(*order))
            out[name] = [dict(row._mapping) for row in result]
    return out


@pytest.mark.parametrize("revision", EARLIER)
def test_db_migrate_keeps_every_row_from_an_earlier_revision(
    empty_database_url: str, empty_engine: Engine, revision: str
) -> None:
    upgrade(empty_engine, revision)
    old = schema(empty_engine)
    fill(empty_engine, old)
    before = read(empty_engine, old)
    empty_engine.dispose()

    stdout = migrate_cli(empty_database_url)

    assert f"at revision {revision}; migrating to {head_revision()}" in stdout
    later = REVISIONS[REVISIONS.index(revision) + 1 :]
    for down, up in zip([revision, *later], later, strict=False):
        assert f"✓ {down} → {up}" in stdout
    assert current_revision(empty_engine) == head_revision()
    assert {name: len(rows) for name, rows in before.items()} == dict.fromkeys(
        old.tables, ROWS_PER_TABLE
    )
    after = read(empty_engine, old)
    for name, rows in before.items():
        assert after[name] == rows, f"table {name} changed"


def test_every_table_of_every_revision_gets_rows(empty_engine: Engine) -> None:
    # Guards the test above: a type representative() does not know fails here first.
    for revision in REVISIONS:
        upgrade(empty_engine, revision)
    metadata = schema(empty_engine)
    fill(empty_engine, metadata)

    assert all(len(rows) == ROWS_PER_TABLE for rows in read(empty_engine, metadata).values())


def test_db_migrate_on_an_empty_database_creates_the_schema(
    empty_database_url: str, empty_engine: Engine
) -> None:
    stdout = migrate_cli(empty_database_url)

    assert f"is empty; migrating to {head_revision()} in {len(REVISIONS)} steps" in stdout
    assert f"✓ empty → {REVISIONS[0]}" in stdout
    assert current_revision(empty_engine) == head_revision()


def test_db_migrate_at_the_newest_revision_does_nothing(database_url: str) -> None:
    stdout = migrate_cli(database_url)

    assert f"is at revision {head_revision()} (the newest)" in stdout
    assert "✓" not in stdout


@pytest.mark.parametrize("revision", EARLIER)
def test_db_migrate_sql_prints_the_upgrade_and_applies_nothing(
    empty_database_url: str, empty_engine: Engine, revision: str
) -> None:
    upgrade(empty_engine, revision)
    empty_engine.dispose()

    stdout = migrate_cli(empty_database_url, "--sql")

    later = REVISIONS[REVISIONS.index(revision) + 1 :]
    assert f"Running upgrade {revision} -> {later[0]}" in stdout
    assert f"-> {revision}\n" not in stdout
    assert f"version_num='{head_revision()}'" in stdout
    assert current_revision(empty_engine) == revision


def test_db_migrate_sql_at_the_newest_revision_says_so(database_url: str) -> None:
    assert migrate_cli(database_url, "--sql").strip() == (
        f"-- at revision {head_revision()} (the newest): nothing to do"
    )


def test_db_migrate_refuses_a_database_from_a_newer_tailrace(
    database_url: str, engine: Engine
) -> None:
    with engine.begin() as connection:
        connection.execute(sa.text("UPDATE alembic_version SET version_num = 'from_the_future'"))

    out = run_cli({**os.environ, "TAILRACE_DATABASE_URL": database_url}, "db", "migrate")

    assert out.returncode == 1
    assert "from_the_future" in out.stderr
    assert "does not know" in " ".join(out.stderr.split())
