"""The metadata database: engines, column types, migrations."""

from typing import TYPE_CHECKING, Any

from tailrace.db.engine import (
    create_engine,
    forget_info,
    is_postgres,
    is_sqlite,
    normalize_url,
    read_only_engine,
    sqlite_url,
)
from tailrace.db.errors import (
    DatabaseError,
    DatabaseNotMigratedError,
    DatabaseTooNewError,
    NaiveDatetimeError,
    log_failure,
    unreachable,
)

if TYPE_CHECKING:
    from tailrace.db.migrate import check_schema, current_revision, reset, upgrade
from tailrace.db.types import UTCDateTime

__all__ = [  # noqa: RUF022 - grouped by concept
    # engines
    "create_engine",
    "forget_info",
    "is_postgres",
    "is_sqlite",
    "normalize_url",
    "read_only_engine",
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
    "log_failure",
    "unreachable",
]


_MIGRATE = frozenset({"check_schema", "current_revision", "reset", "upgrade"})


def __getattr__(name: str) -> Any:
    # Migrations need Alembic: imported when first used, not by every `tailrace` command.
    if name in _MIGRATE:
        from tailrace.db import migrate

        return getattr(migrate, name)
    raise AttributeError(f"module 'tailrace.db' has no attribute {name!r}")
