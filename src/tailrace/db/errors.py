"""Errors raised by the database layer."""

from __future__ import annotations

import logging

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


# PostgreSQL's connection exceptions (class 08) and a server shutting down or starting up.
_UNREACHABLE_STATES = ("08", "57P01", "57P02", "57P03")


def unreachable(exc: BaseException) -> str | None:
    """Why the database cannot be reached, when ``exc`` says it: a connection refused,
    dropped or ended by a server shutting down (SQLAlchemy invalidated it). None for any
    other error — a deadlock, a timeout, SQLite's "no such table" — which deserves its
    traceback. For a component that retries: one line while the database restarts."""
    from sqlalchemy.exc import DBAPIError

    if not isinstance(exc, DBAPIError):
        return None
    reason = " ".join(str(exc.orig).split())[:300]
    if exc.connection_invalidated:
        return reason
    try:
        import psycopg
    except ImportError:  # SQLite only: its errors all deserve a traceback
        return None
    if not isinstance(exc.orig, psycopg.OperationalError):
        return None
    state = exc.orig.sqlstate
    return reason if state is None or state.startswith(_UNREACHABLE_STATES) else None


def log_failure(logger: logging.Logger, exc: BaseException, what: str, then: str) -> None:
    """Log that ``what`` failed and ``then`` follows: one warning line while the database
    is unreachable (it restarts, and the component retries), the traceback otherwise."""
    if (reason := unreachable(exc)) is not None:
        logger.warning("%s failed: the database is unreachable (%s); %s", what, reason, then)
    else:
        logger.error("%s failed; %s", what, then, exc_info=exc)
