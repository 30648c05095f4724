from __future__ import annotations

from collections.abc import Iterator

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Column, Integer, MetaData, Table, inspect, text
from sqlalchemy.engine import Engine

from tailrace.db import (
    DatabaseNotMigratedError,
    DatabaseTooNewError,
    check_schema,
    create_engine,
    current_revision,
    reset,
    upgrade,
)
from tailrace.db.migrate import MIGRATIONS_DIR, downgrade, head_revision
from tailrace.db.models import Base


@pytest.fixture
def empty_engine(empty_database_url: str) -> Iterator[Engine]:
    engine = create_engine(empty_database_url)
    yield engine
    engine.dispose()


def schema_diff(engine: Engine, metadata: MetaData = Base.metadata) -> list[object]:
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        return list(compare_metadata(context, metadata))


def test_migrations_create_exactly_the_models_schema(empty_engine: Engine) -> None:
    upgrade(empty_engine)

    assert schema_diff(empty_engine) == []


def test_the_comparison_notices_a_difference(empty_engine: Engine) -> None:
    upgrade(empty_engine)
    metadata = MetaData()
    for table in Base.metadata.tables.values():
        table.to_metadata(metadata)
    Table("not_migrated", metadata, Column("id", Integer, primary_key=True))

    assert [entry[0] for entry in schema_diff(empty_engine, metadata)] == ["add_table"]


def test_downgrade_to_base_removes_every_table(empty_engine: Engine) -> None:
    upgrade(empty_engine)
    downgrade(empty_engine, "base")

    assert set(inspect(empty_engine).get_table_names()) == {"alembic_version"}
    assert current_revision(empty_engine) is None
    upgrade(empty_engine)
    assert schema_diff(empty_engine) == []


def test_check_schema_names_the_fix_when_behind(empty_engine: Engine) -> None:
    with pytest.raises(DatabaseNotMigratedError, match="Run `tailrace db migrate`"):
        check_schema(empty_engine)

    upgrade(empty_engine)
    check_schema(empty_engine)
    assert current_revision(empty_engine) == head_revision()


def test_check_schema_rejects_a_database_from_a_newer_tailrace(engine: Engine) -> None:
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = 'from_the_future'"))

    with pytest.raises(DatabaseTooNewError, match="from_the_future"):
        check_schema(engine)


def test_reset_drops_data_and_stray_tables(engine: Engine) -> None:
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE stray (id INTEGER PRIMARY KEY)"))
        connection.execute(text("INSERT INTO connection (conn_id, uri) VALUES ('c', 'x://')"))

    reset(engine)

    assert "stray" not in inspect(engine).get_table_names()
    with engine.connect() as connection:
        assert connection.scalar(text("SELECT count(*) FROM connection")) == 0
    check_schema(engine)


def test_migrations_ship_inside_the_package() -> None:
    assert (MIGRATIONS_DIR / "env.py").is_file()
    assert (MIGRATIONS_DIR / "script.py.mako").is_file()
    assert sorted(p.name for p in (MIGRATIONS_DIR / "versions").glob("0*.py"))[0] == (
        "0001_initial.py"
    )
