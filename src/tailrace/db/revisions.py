"""Which revision the code expects and the database is at, read without Alembic (a
second start, or a CLI command, on a database at head then never imports it)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from tailrace.db.engine import read_only_engine

_VERSIONS = Path(__file__).parent / "migrations" / "versions"


def newest_revision() -> str:
    """The newest migration's revision id, read from the file names (``0003_….py``; the
    ids count up, see tailrace.db.migrate) without importing Alembic."""
    return max(p.name.split("_", 1)[0] for p in _VERSIONS.glob("[0-9]*_*.py"))


def stored_revision(engine: Engine) -> str | None:
    """The database's one revision; None for a new database (or several heads)."""
    try:
        with read_only_engine(engine).connect() as conn:
            versions = conn.execute(text("SELECT version_num FROM alembic_version")).all()
    except DBAPIError:
        return None  # no such table yet: a new database
    return versions[0][0] if len(versions) == 1 else None


def upgrade_if_behind(engine: Engine) -> None:
    """Migrate the database to head unless it is there already (then Alembic stays out)."""
    if stored_revision(engine) != newest_revision():
        from tailrace.db.migrate import upgrade

        upgrade(engine)
