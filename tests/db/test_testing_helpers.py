from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from sqlalchemy import inspect

from tailrace.db import create_engine
from tailrace.testing import copy_sqlite_database, migrate_database, temporary_postgres_database


def database_names(server: str) -> set[str]:
    with psycopg.connect(server.replace("+psycopg", ""), autocommit=True) as admin:
        return {row[0] for row in admin.execute("SELECT datname FROM pg_database")}


@pytest.mark.postgres
def test_a_temporary_database_is_dropped_despite_leaked_connections(postgres_server: str) -> None:
    with temporary_postgres_database(postgres_server, migrate=True) as url:
        name = url.rsplit("/", 1)[1]
        leaked = psycopg.connect(url.replace("+psycopg", ""))
        assert name in database_names(postgres_server)

    assert name not in database_names(postgres_server)
    leaked.close()


@pytest.mark.postgres
def test_templates_are_copied_with_their_schema(
    postgres_server: str, postgres_template: str
) -> None:
    with temporary_postgres_database(postgres_server, template=postgres_template) as url:
        engine = create_engine(url)
        try:
            assert "task_instance" in inspect(engine).get_table_names()
        finally:
            engine.dispose()


def test_sqlite_copies_are_independent(tmp_path: Path) -> None:
    template = tmp_path / "template" / "tailrace.db"
    migrate_database(f"sqlite:///{template}")

    url = copy_sqlite_database(template, tmp_path / "copy")

    engine = create_engine(url)
    try:
        assert "task_instance" in inspect(engine).get_table_names()
    finally:
        engine.dispose()
    assert url == f"sqlite:///{tmp_path}/copy/tailrace.db"
