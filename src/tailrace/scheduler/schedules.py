"""When runs are due: pure functions of a schedule, the last run and ``now``.

Schedules follow Airflow 3's trigger timetables: a run's logical date is the moment it
is due, and its data interval is that single moment. With ``catchup=False`` only the most
recent due moment is run; with ``catchup=True`` every moment since ``start_date`` is.

A cron expression is read on the wall clock of the DAG's time zone, as Airflow's cron
timetables read it: ``0 0 * * *`` in ``America/New_York`` is 05:00 UTC in winter and
04:00 UTC in summer. Across a DST change a wall-clock time that does not exist (the hour
skipped in spring) runs at the same minutes one hour later, and one that exists twice
(the hour repeated in autumn) runs at its second occurrence; a cron that fires every hour
keeps firing every real hour through the change. A ``timedelta`` schedule is absolute
time: the interval never stretches or shrinks with DST.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tailrace.sdk._cron import WallClockCron as _Cron
from tailrace.sdk.timezone import parse_timezone
from tailrace.serialization import SerializedDag, SerializedSchedule


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _cron(schedule: SerializedSchedule, timezone: str) -> _Cron:
    assert schedule.value is not None
    return _Cron(schedule.value, parse_timezone(timezone))


def _latest_at_or_before(
    schedule: SerializedSchedule, timezone: str, start: datetime, now: datetime
) -> datetime | None:
    if now < start:
        return None
    if schedule.kind == "cron":
        latest = _cron(schedule, timezone).at_or_before(now)
        return latest if latest >= start else None
    assert schedule.seconds is not None
    steps = int((now - start).total_seconds() // schedule.seconds)
    return start + timedelta(seconds=steps * schedule.seconds)


def next_run_date(
    schedule: SerializedSchedule,
    *,
    start_date: datetime | None,
    end_date: datetime | None,
    catchup: bool,
    last_logical_date: datetime | None,
    now: datetime,
    timezone: str = "UTC",
) -> datetime | None:
    """The logical date (UTC) of the next scheduled run (possibly in the future), or None.

    ``timezone`` is the IANA name (or ``+HH:MM`` offset) whose wall clock a cron
    expression is read on.
    """
    if schedule.kind == "none" or start_date is None:
        return None
    start_date = _aware(start_date).astimezone(UTC)
    if schedule.kind == "once":
        return start_date if last_logical_date is None else None
    if schedule.kind == "cron":
        cron = _cron(schedule, timezone)
        if last_logical_date is None:
            candidate = cron.at_or_after(start_date)
        else:
            candidate = cron.next(_aware(last_logical_date))
    else:
        assert schedule.seconds is not None
        if last_logical_date is None:
            candidate = start_date
        else:
            candidate = _aware(last_logical_date) + timedelta(seconds=schedule.seconds)
    if not catchup:
        latest = _latest_at_or_before(schedule, timezone, start_date, _aware(now))
        if latest is not None and latest > candidate:
            candidate = latest
    if end_date is not None and candidate > _aware(end_date):
        return None
    return candidate.astimezone(UTC)


def next_scheduled(
    dag: SerializedDag, last_logical_date: datetime | None, now: datetime
) -> datetime | None:
    """``next_run_date`` for a serialized DAG."""
    return next_run_date(
        dag.schedule,
        start_date=dag.start_date,
        end_date=dag.end_date,
        catchup=dag.catchup,
        last_logical_date=last_logical_date,
        now=now,
        timezone=dag.timezone,
    )
