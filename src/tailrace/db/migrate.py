"""Schema migrations, driven programmatically: no alembic.ini is needed at run time.

Developers create a revision with ``autogenerate_revision(engine, "what changed")``
against a database at head, then review the generated file: it must run on SQLite
(batch mode) and PostgreSQL, and ``tests/db/test_migrations.py`` checks it does.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import MetaData, text
from sqlalchemy.engine import Connection, Engine

from tailrace.db.engine import read_only_engine
from tailrace.db.errors import DatabaseError, DatabaseNotMigratedError, DatabaseTooNewError

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def alembic_config(connection: Connection | None = None) -> Config:
    """An alembic Config for our migrations; env.py runs them on ``connection``."""
    config = Config()
    config.set_main_option("script_location", _escape(str(MIGRATIONS_DIR)))
    config.set_main_option("file_template", "%%(rev)s_%%(slug)s")
    config.attributes["connection"] = connection
    return config


def head_revision() -> str | None:
    return _script().get_current_head()


# Components starting together on a new PostgreSQL database migrate one at a time.
_MIGRATION_LOCK = 0x7461_696C_6D69_6772  # "tailmigr"


def upgrade(engine: Engine, revision: str = "head") -> None:
    with engine.connect() as connection:
        postgres = connection.dialect.name == "postgresql"
        if postgres:
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": _MIGRATION_LOCK})
            connection.commit()
        try:
            command.upgrade(alembic_config(connection), revision)
        finally:
            if postgres:
                connection.rollback()
                connection.execute(
                    text("SELECT pg_advisory_unlock(:key)"), {"key": _MIGRATION_LOCK}
                )
                connection.commit()


def downgrade(engine: Engine, revision: str = "base") -> None:
    with engine.connect() as connection:
        command.downgrade(alembic_config(connection), revision)


def reset(engine: Engine) -> None:
    """Drop every table in the database (ours, alembic's and strays), then upgrade."""
    with engine.begin() as connection:
        existing = MetaData()
        existing.reflect(connection)
        existing.drop_all(connection)
    upgrade(engine)


def current_revision(engine: Engine) -> str | None:
    heads = _current_heads(engine)
    if len(heads) > 1:
        raise DatabaseError(f"the database {_display(engine)} has several heads: {heads}")
    return heads[0] if heads else None


def check_schema(engine: Engine) -> None:
    """Raise unless the database is exactly at the revision this code expects."""
    script = _script()
    expected = script.get_current_head()
    current = _current_heads(engine)
    if current == ((expected,) if expected else ()):
        return
    for revision in current:
        try:
            known = script.get_revision(revision) is not None
        except CommandError:
            known = False
        if not known:
            raise DatabaseTooNewError(_display(engine), revision, expected)
    raise DatabaseNotMigratedError(_display(engine), ",".join(current) or None, expected)


def autogenerate_revision(engine: Engine, message: str, rev_id: str | None = None) -> None:
    """Write a new revision file from the difference between the models and ``engine``."""
    if rev_id is None:
        latest = head_revision()
        rev_id = f"{int(latest) + 1:04d}" if latest and latest.isdigit() else None
    with engine.connect() as connection:
        command.revision(
            alembic_config(connection), message=message, autogenerate=True, rev_id=rev_id
        )


def _current_heads(engine: Engine) -> tuple[str, ...]:
    with read_only_engine(engine).connect() as connection:
        return tuple(MigrationContext.configure(connection).get_current_heads())


def _script() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config())


def _display(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=True)


def _escape(value: str) -> str:
    # Config values go through ConfigParser interpolation.
    return value.replace("%", "%%")
