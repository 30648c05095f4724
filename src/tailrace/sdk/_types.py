"""Small shared helpers: the "argument not set" sentinel, id validation, time coercion."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from tailrace.sdk.errors import InvalidIdError


class ArgNotSet:
    """Type of :data:`NOTSET`, the marker for "no value given" where ``None`` is a value."""

    _instance: ArgNotSet | None = None

    def __new__(cls) -> ArgNotSet:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NOTSET"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "NOTSET"


NOTSET: Final = ArgNotSet()

XCOM_RETURN_KEY: Final = "return_value"

_ID_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")
MAX_ID_LENGTH: Final = 250


def validate_id(value: object, *, kind: str, dag_id: str | None = None) -> str:
    """Return ``value`` if it is a valid DAG/task/group id, else raise :class:`InvalidIdError`."""
    if not isinstance(value, str):
        raise InvalidIdError(
            kind=kind,
            value=value,
            reason=f"must be a string, got {type(value).__name__}",
            dag_id=dag_id,
        )
    if not value:
        raise InvalidIdError(kind=kind, value=value, reason="must not be empty", dag_id=dag_id)
    if len(value) > MAX_ID_LENGTH:
        raise InvalidIdError(
            kind=kind,
            value=value,
            reason=f"is {len(value)} characters long, the limit is {MAX_ID_LENGTH}",
            dag_id=dag_id,
        )
    if not _ID_RE.match(value):
        bad = sorted({c for c in value if not re.match(r"[A-Za-z0-9_.\-]", c)})
        raise InvalidIdError(
            kind=kind, value=value, reason=f"contains invalid characters {bad}", dag_id=dag_id
        )
    return value


def as_utc(value: datetime | None) -> datetime | None:
    """Return ``value`` as an aware datetime; naive datetimes are taken as UTC."""
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def as_timedelta(value: timedelta | float | int | None) -> timedelta | None:
    """Accept a timedelta or a number of seconds (as Airflow does for retry_delay)."""
    if value is None or isinstance(value, timedelta):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected a datetime.timedelta or seconds, got {value!r}")
    return timedelta(seconds=value)


def is_nonstr_sequence(value: Any) -> bool:
    return isinstance(value, list | tuple)
