"""Time zones of DAGs and the pendulum DateTimes tasks see, as in ``airflow.sdk.timezone``.

A DAG's time zone is its ``start_date``'s (UTC for a naive one); cron schedules are read
on that zone's wall clock. Values given to tasks (``logical_date``, ``data_interval_start``
and friends) are :class:`pendulum.DateTime`, as in Airflow.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pendulum

__all__ = ["coerce_datetime", "json_default", "parse_timezone", "timezone_name", "utc"]

utc = dt.UTC
_OFFSET_RE = re.compile(r"^([+-])(\d{2}):(\d{2})$")


def timezone_name(tz: dt.tzinfo | None) -> str:
    """The stored name of ``tz``: its IANA key, ``UTC``, or a ``+HH:MM`` offset."""
    if tz is None:
        return "UTC"
    key = getattr(tz, "key", None) or getattr(tz, "name", None)
    if isinstance(key, str) and key and not _OFFSET_RE.match(key):
        return "UTC" if key in ("UTC", "Etc/UTC") else key
    offset = tz.utcoffset(None)
    if offset is None:
        raise ValueError(
            f"time zone {tz!r} has no fixed offset and no IANA name; use one of "
            "pendulum.timezone('Area/City') or zoneinfo.ZoneInfo('Area/City')"
        )
    if not offset:
        return "UTC"
    minutes = int(offset.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    hours, minutes = divmod(abs(minutes), 60)
    return f"{sign}{hours:02d}:{minutes:02d}"


def parse_timezone(name: str) -> dt.tzinfo:
    """The time zone ``timezone_name`` stored as ``name``."""
    match = _OFFSET_RE.match(name)
    if match is not None:
        sign, hours, minutes = match.groups()
        delta = dt.timedelta(hours=int(hours), minutes=int(minutes))
        return dt.timezone(-delta if sign == "-" else delta)
    if name == "UTC":
        return utc
    import pendulum

    return pendulum.timezone(name)


def coerce_datetime(value: dt.datetime | None) -> pendulum.DateTime | None:
    """``value`` as a :class:`pendulum.DateTime` (naive values taken as UTC)."""
    if value is None:
        return None
    import pendulum

    if isinstance(value, pendulum.DateTime):
        return value
    if value.tzinfo is None:
        return pendulum.instance(value, tz="UTC")
    return pendulum.instance(value)


def json_default(value: Any) -> Any:
    """The stdlib datetime value behind a subclass msgspec refuses (pendulum's
    ``DateTime``, ``Date``, ``Time``, ``Duration``), so it encodes exactly as that would."""
    if isinstance(value, dt.datetime):
        return dt.datetime(
            value.year,
            value.month,
            value.day,
            value.hour,
            value.minute,
            value.second,
            value.microsecond,
            tzinfo=value.tzinfo,
            fold=value.fold,
        )
    if isinstance(value, dt.date):
        return dt.date(value.year, value.month, value.day)
    if isinstance(value, dt.time):
        return dt.time(
            value.hour, value.minute, value.second, value.microsecond, tzinfo=value.tzinfo
        )
    if isinstance(value, dt.timedelta):
        return dt.timedelta(days=value.days, seconds=value.seconds, microseconds=value.microseconds)
    raise TypeError(f"Encoding objects of type {type(value).__name__} is unsupported")
