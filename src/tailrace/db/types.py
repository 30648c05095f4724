"""Column types shared by the schema."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

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

    # On SQLite, each side is one step instead of two (this type's, then SQLAlchemy's
    # string formatting or parsing): a scheduler step binds a dozen times a task. The text
    # is SQLAlchemy's DATETIME storage format, "YYYY-MM-DD HH:MM:SS.ffffff", exactly.

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        if dialect.name != "sqlite":
            return super().bind_processor(dialect)
        utc_of = self.process_bind_param

        def process(value: object) -> str | None:
            utc = utc_of(value, dialect)
            return None if utc is None else utc.isoformat(" ", "microseconds")

        return process

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], Any] | None:
        if dialect.name != "sqlite":
            return super().result_processor(dialect, coltype)
        parse, to_utc = datetime.fromisoformat, self.process_result_value

        def process(value: str | None) -> datetime | None:
            return None if value is None else to_utc(parse(value), dialect)

        return process
