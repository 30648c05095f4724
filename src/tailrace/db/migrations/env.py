"""Alembic environment. Run through ``tailrace.db.migrate``, which passes the connection."""

from __future__ import annotations

from typing import Any, Literal

from alembic import context
from sqlalchemy import text
from sqlalchemy.engine import Connection

from tailrace.db.models import Base
from tailrace.db.types import UTCDateTime

# Serialises concurrent migrators (say, two schedulers starting at once) on PostgreSQL.
POSTGRES_MIGRATION_LOCK = 0x7461_696C  # "tail"

target_metadata = Base.metadata


def render_item(type_: str, obj: Any, autogen_context: Any) -> str | Literal[False]:
    # Migrations must not change when the application's column types do.
    if type_ == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime(timezone=True)"
    return False


def run_migrations(connection: Connection) -> None:
    sqlite = connection.dialect.name == "sqlite"
    if sqlite:
        _sqlite_foreign_keys(connection, enabled=False)
    try:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=sqlite,
            render_item=render_item,
            compare_type=True,
            # Our engine emits BEGIN itself, so DDL on SQLite is transactional too.
            transactional_ddl=True,
        )
        with context.begin_transaction():
            if connection.dialect.name == "postgresql":
                connection.execute(
                    text("SELECT pg_advisory_xact_lock(:key)"), {"key": POSTGRES_MIGRATION_LOCK}
                )
            context.run_migrations()
        if sqlite:
            _sqlite_check_foreign_keys(connection)
    finally:
        if sqlite:
            _sqlite_foreign_keys(connection, enabled=True)


def _sqlite_foreign_keys(connection: Connection, *, enabled: bool) -> None:
    # Batch migrations copy and drop tables, which enforcement would cascade into. The
    # pragma is a no-op inside a transaction, so it goes straight to the driver.
    connection.connection.driver_connection.execute(  # type: ignore[union-attr]
        f"PRAGMA foreign_keys = {'ON' if enabled else 'OFF'}"
    )


def _sqlite_check_foreign_keys(connection: Connection) -> None:
    cursor = connection.connection.driver_connection.execute(  # type: ignore[union-attr]
        "PRAGMA foreign_key_check"
    )
    violations = cursor.fetchall()
    if violations:
        raise RuntimeError(f"the migration left rows violating foreign keys: {violations[:10]}")


def run_offline() -> None:
    url = context.config.get_main_option("sqlalchemy.url")
    if url is None:
        from tailrace.config import load_settings

        url = load_settings().database_url
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=url.startswith("sqlite"),
        render_item=render_item,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        run_migrations(connection)
        return
    from tailrace.db.engine import create_engine

    engine = create_engine(context.config.get_main_option("sqlalchemy.url"))
    try:
        with engine.connect() as connection:
            run_migrations(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
