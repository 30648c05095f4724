"""When runs are due: pure functions of a schedule, the last run and ``now``.

Schedules follow Airflow 3's trigger timetables: a run's logical date is the moment it
is due, and its data interval is that single moment. With ``catchup=False`` only the most
recent due moment is run; with ``catchup=True`` every moment since ``start_date`` is.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from croniter import croniter

from tailrace.serialization import SerializedDag, SerializedSchedule


def _cron_next(expr: str, after: datetime) -> datetime:
    result: datetime = croniter(expr, after).get_next(datetime)
    return result


def _cron_prev(expr: str, at_or_before: datetime) -> datetime:
    if croniter.match(expr, at_or_before):
        return at_or_before
    result: datetime = croniter(expr, at_or_before).get_prev(datetime)
    return result


def _first_at_or_after(schedule: SerializedSchedule, start: datetime) -> datetime:
    if schedule.kind == "cron":
        assert schedule.value is not None
        if croniter.match(schedule.value, start):
            return start
        return _cron_next(schedule.value, start)
    return start


def _following(schedule: SerializedSchedule, start: datetime, moment: datetime) -> datetime:
    if schedule.kind == "cron":
        assert schedule.value is not None
        return _cron_next(schedule.value, moment)
    assert schedule.seconds is not None
    return moment + timedelta(seconds=schedule.seconds)


def _latest_at_or_before(
    schedule: SerializedSchedule, start: datetime, now: datetime
) -> datetime | None:
    if now < start:
        return None
    if schedule.kind == "cron":
        assert schedule.value is not None
        latest = _cron_prev(schedule.value, now)
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
) -> datetime | None:
    """The logical date of the next scheduled run (possibly in the future), or None."""
    if schedule.kind == "none" or start_date is None:
        return None
    if schedule.kind == "once":
        return start_date if last_logical_date is None else None
    if last_logical_date is None:
        candidate = _first_at_or_after(schedule, start_date)
    else:
        candidate = _following(schedule, start_date, last_logical_date)
    if not catchup:
        latest = _latest_at_or_before(schedule, start_date, now)
        if latest is not None and latest > candidate:
            candidate = latest
    if end_date is not None and candidate > end_date:
        return None
    return candidate


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
    )
