"""Throwaway metadata databases for tests: SQLite files and PostgreSQL databases."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from tailrace.db.engine import create_engine, normalize_url, sqlite_url
from tailrace.db.migrate import upgrade

POSTGRES_SERVER_URL_ENV = "TAILRACE_TEST_POSTGRES_URL"
DEFAULT_POSTGRES_SERVER_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def temporary_sqlite_url(directory: str | Path, name: str = "tailrace.db") -> str:
    """The URL of a (not yet existing) SQLite database file in ``directory``."""
    return sqlite_url(Path(directory) / name)


def migrate_database(url: str) -> None:
    engine = create_engine(url)
    try:
        upgrade(engine)
    finally:
        engine.dispose()


def copy_sqlite_database(source: str | Path, directory: str | Path) -> str:
    """Copy a closed SQLite database file into ``directory``; return the copy's URL.

    Copying a migrated template is much faster than migrating each test's database.
    """
    target = Path(directory) / "tailrace.db"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    return sqlite_url(target)


def postgres_server_url() -> str:
    """Where the test PostgreSQL server is: ``$TAILRACE_TEST_POSTGRES_URL`` or localhost."""
    return os.environ.get(POSTGRES_SERVER_URL_ENV) or DEFAULT_POSTGRES_SERVER_URL


def postgres_unavailable_reason(server_url: str | None = None, timeout: int = 3) -> str | None:
    """None when the server accepts connections, else why not."""
    try:
        with _admin_connection(server_url, connect_timeout=timeout):
            return None
    except ImportError as exc:
        return f"psycopg is not installed ({exc}); install tailrace[postgres]"
    except Exception as exc:
        shown = normalize_url(server_url or postgres_server_url())
        return f"cannot connect to {shown.render_as_string(hide_password=True)}: {exc}"


@contextmanager
def temporary_postgres_database(
    server_url: str | None = None,
    *,
    template: str | None = None,
    prefix: str = "tailrace_test",
    migrate: bool = False,
) -> Iterator[str]:
    """Create a database on the server, yield its URL, and drop it afterwards.

    ``template`` names a database to copy (``CREATE DATABASE ... TEMPLATE``: fast, and
    nothing may be connected to the template meanwhile); ``migrate`` upgrades the new
    database to head. The drop uses ``WITH (FORCE)``, so connections a test leaked
    cannot make the database outlive it.
    """
    from psycopg import sql

    server_url = server_url or postgres_server_url()
    name = f"{prefix}_{uuid.uuid4().hex}"
    create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template is not None:
        create = sql.SQL("{} TEMPLATE {}").format(create, sql.Identifier(template))
    with _admin_connection(server_url) as admin:
        admin.execute(create)
    url = normalize_url(server_url).set(database=name).render_as_string(hide_password=False)
    try:
        if migrate:
            migrate_database(url)
        yield url
    finally:
        with _admin_connection(server_url) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@contextmanager
def _admin_connection(server_url: str | None, **kwargs: Any) -> Iterator[Any]:
    import psycopg

    url = make_url(server_url or postgres_server_url()).set(drivername="postgresql")
    with psycopg.connect(
        url.render_as_string(hide_password=False), autocommit=True, **kwargs
    ) as connection:
        yield connection
