"""Errors raised by the database layer."""

from __future__ import annotations

from tailrace.sdk.errors import TailraceError


class DatabaseError(TailraceError):
    """Root of the database layer's errors."""


class DatabaseNotMigratedError(DatabaseError):
    """The database schema is behind the revision this version of Tailrace expects."""

    def __init__(self, url: str, current: str | None, expected: str | None) -> None:
        self.url = url
        self.current = current
        self.expected = expected
        found = f"is at revision {current}" if current else "has no Tailrace schema"
        super().__init__(
            f"The database {url} {found}, but this version of Tailrace needs revision {expected}.",
            hint="Run `tailrace db migrate`.",
        )


class DatabaseTooNewError(DatabaseError):
    """The database was migrated by a newer Tailrace than the one running."""

    def __init__(self, url: str, current: str, expected: str | None) -> None:
        self.url = url
        self.current = current
        self.expected = expected
        super().__init__(
            f"The database {url} is at revision {current}, which this version of Tailrace "
            f"does not know (its newest is {expected}).",
            hint="Upgrade Tailrace, or point it at another database.",
        )


class NaiveDatetimeError(DatabaseError, ValueError):
    """A datetime without a timezone was about to be stored."""

    def __init__(self, value: object) -> None:
        self.value = value
        super().__init__(
            f"Refusing to store the naive datetime {value}: the database keeps points in "
            "time, and a datetime without tzinfo does not name one.",
            hint="Make it aware, e.g. datetime.now(UTC) or value.replace(tzinfo=UTC).",
        )
