"""Column types shared by the schema."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import DateTime
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

from tailrace.db.errors import NaiveDatetimeError


class UTCDateTime(TypeDecorator[datetime]):
    """A point in time, stored as UTC and always read back timezone-aware in UTC.

    PostgreSQL stores ``timestamptz``. SQLite has no timezone support, so the value is
    converted to UTC and stored without an offset; converting first keeps the stored
    strings in one zone, so that comparing them as text compares instants.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: object, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if not isinstance(value, datetime):
            raise TypeError(f"expected a datetime, got {type(value).__name__}: {value!r}")
        if value.tzinfo is None or value.utcoffset() is None:
            raise NaiveDatetimeError(value.isoformat())
        value = value.astimezone(UTC)
        if dialect.name == "sqlite":
            return value.replace(tzinfo=None)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)
