"""The metadata database: engines, sessions, column types, migrations."""

from tailrace.db.engine import (
    create_engine,
    is_postgres,
    is_sqlite,
    normalize_url,
    read_only_engine,
    session_factory,
    sqlite_url,
)
from tailrace.db.errors import (
    DatabaseError,
    DatabaseNotMigratedError,
    DatabaseTooNewError,
    NaiveDatetimeError,
)
from tailrace.db.migrate import check_schema, current_revision, reset, upgrade
from tailrace.db.types import UTCDateTime

__all__ = [  # noqa: RUF022 - grouped by concept
    # engines and sessions
    "create_engine",
    "is_postgres",
    "is_sqlite",
    "normalize_url",
    "read_only_engine",
    "session_factory",
    "sqlite_url",
    # migrations
    "check_schema",
    "current_revision",
    "reset",
    "upgrade",
    # types
    "UTCDateTime",
    # errors
    "DatabaseError",
    "DatabaseNotMigratedError",
    "DatabaseTooNewError",
    "NaiveDatetimeError",
]
