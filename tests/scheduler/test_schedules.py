from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pendulum
import pytest

from tailrace.scheduler.schedules import next_run_date
from tailrace.serialization import SerializedSchedule

START = datetime(2026, 1, 1, tzinfo=UTC)
DAILY = SerializedSchedule(kind="cron", value="0 0 * * *")
HOURLY_DELTA = SerializedSchedule(kind="delta", seconds=3600)


def at(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("schedule", "catchup", "last", "now", "expected"),
    [
        # First run of a catching-up DAG: start_date itself (it is on the cron).
        (DAILY, True, None, at(2026, 1, 10), START),
        # Catchup walks day by day from the last run.
        (DAILY, True, at(2026, 1, 3), at(2026, 1, 10), at(2026, 1, 4)),
        # Without catchup only the latest due moment runs.
        (DAILY, False, None, at(2026, 1, 10, 15), at(2026, 1, 10)),
        (DAILY, False, at(2026, 1, 3), at(2026, 1, 10, 15), at(2026, 1, 10)),
        # The next moment may be in the future: the scheduler waits for it.
        (DAILY, False, at(2026, 1, 10), at(2026, 1, 10, 15), at(2026, 1, 11)),
        # Before start_date nothing is due before start_date.
        (DAILY, False, None, at(2025, 12, 1), START),
        (HOURLY_DELTA, True, at(2026, 1, 1, 5), at(2026, 1, 2), at(2026, 1, 1, 6)),
        (HOURLY_DELTA, False, None, at(2026, 1, 1, 5, 30), at(2026, 1, 1, 5)),
    ],
)
def test_next_run_date(
    schedule: SerializedSchedule,
    catchup: bool,
    last: datetime | None,
    now: datetime,
    expected: datetime,
) -> None:
    got = next_run_date(
        schedule, start_date=START, end_date=None, catchup=catchup, last_logical_date=last, now=now
    )
    assert got == expected


def test_cron_start_date_off_the_schedule_aligns_forward() -> None:
    got = next_run_date(
        DAILY,
        start_date=at(2026, 1, 1, 12),
        end_date=None,
        catchup=True,
        last_logical_date=None,
        now=at(2026, 2, 1),
    )
    assert got == at(2026, 1, 2)


def test_end_date_stops_scheduling() -> None:
    got = next_run_date(
        DAILY,
        start_date=START,
        end_date=at(2026, 1, 3),
        catchup=True,
        last_logical_date=at(2026, 1, 3),
        now=at(2026, 2, 1),
    )
    assert got is None


def test_once_and_manual() -> None:
    once = SerializedSchedule(kind="once")
    kwargs = {"start_date": START, "end_date": None, "catchup": False, "now": at(2026, 5, 1)}
    assert next_run_date(once, last_logical_date=None, **kwargs) == START  # type: ignore[arg-type]
    assert next_run_date(once, last_logical_date=START, **kwargs) is None  # type: ignore[arg-type]
    none = SerializedSchedule(kind="none")
    assert next_run_date(none, last_logical_date=None, **kwargs) is None  # type: ignore[arg-type]


# --- time zones and DST -------------------------------------------------------------------
# Expected moments follow Airflow's documentation on time zones: "Time zone aware DAGs that
# use cron schedules respect daylight savings time. For example, a DAG with a start date in
# the US/Eastern time zone with a schedule of 0 0 * * * will run daily at 04:00 UTC during
# daylight savings time and at 05:00 otherwise"; timedelta schedules "do not adjust for
# daylight savings time when scheduling subsequent runs". Around a change, Airflow's cron
# timetables run a skipped wall-clock time one hour later and a repeated one at its second
# occurrence, and a cron firing every hour keeps firing every real hour.


def walk(
    schedule: SerializedSchedule, timezone: str, start: datetime, count: int
) -> list[datetime]:
    """The first ``count`` logical dates of a catching-up DAG, as the scheduler walks them."""
    dates: list[datetime] = []
    last = None
    for _ in range(count):
        last = next_run_date(
            schedule,
            start_date=start,
            end_date=None,
            catchup=True,
            last_logical_date=last,
            now=at(2030, 1, 1),
            timezone=timezone,
        )
        assert last is not None
        dates.append(last)
    return dates


def test_midnight_in_new_york_moves_from_05_to_04_utc_at_the_spring_change() -> None:
    start = pendulum.datetime(2026, 3, 6, tz="America/New_York")
    got = walk(DAILY, "America/New_York", start, 4)
    # US clocks go forward at 02:00 on 8 March 2026; midnight of the 8th is still EST.
    assert got == [at(2026, 3, 6, 5), at(2026, 3, 7, 5), at(2026, 3, 8, 5), at(2026, 3, 9, 4)]


def test_a_skipped_wall_clock_time_runs_an_hour_later() -> None:
    # Amsterdam skips 02:00-03:00 on 29 March 2026 (CET +01:00 -> CEST +02:00).
    schedule = SerializedSchedule(kind="cron", value="30 2 * * *")
    start = pendulum.datetime(2026, 3, 28, tz="Europe/Amsterdam")
    got = walk(schedule, "Europe/Amsterdam", start, 3)
    # 02:30 CET; 02:30 does not exist, so 03:30 CEST; 02:30 CEST.
    assert got == [at(2026, 3, 28, 1, 30), at(2026, 3, 29, 1, 30), at(2026, 3, 30, 0, 30)]


def test_a_repeated_wall_clock_time_runs_once_at_its_second_occurrence() -> None:
    # Amsterdam repeats 02:00-03:00 on 25 October 2026 (CEST -> CET).
    schedule = SerializedSchedule(kind="cron", value="30 2 * * *")
    start = pendulum.datetime(2026, 10, 24, tz="Europe/Amsterdam")
    got = walk(schedule, "Europe/Amsterdam", start, 3)
    # 02:30 CEST; 02:30 CET (the second one); 02:30 CET.
    assert got == [at(2026, 10, 24, 0, 30), at(2026, 10, 25, 1, 30), at(2026, 10, 26, 1, 30)]


@pytest.mark.parametrize(
    "start",
    [
        # Autumn: the wall clock shows 02:00 twice; both are runs, an hour apart.
        pendulum.datetime(2026, 10, 25, 0, tz="UTC"),
        # Spring: the wall clock jumps from 02:00 to 03:00; the run stays an hour later.
        pendulum.datetime(2026, 3, 29, 0, tz="UTC"),
    ],
)
def test_an_hourly_cron_fires_every_real_hour_through_a_change(start: datetime) -> None:
    schedule = SerializedSchedule(kind="cron", value="0 * * * *")
    got = walk(schedule, "Europe/Amsterdam", start, 4)
    assert [(d - start).total_seconds() / 3600 for d in got] == [0, 1, 2, 3]


def test_a_timedelta_schedule_keeps_absolute_intervals_across_dst() -> None:
    day = SerializedSchedule(kind="delta", seconds=86400)
    start = pendulum.datetime(2026, 3, 7, tz="America/New_York")  # 05:00 UTC
    got = walk(day, "America/New_York", start, 3)
    assert got == [at(2026, 3, 7, 5), at(2026, 3, 8, 5), at(2026, 3, 9, 5)]


def test_without_catchup_the_latest_due_local_midnight_runs() -> None:
    got = next_run_date(
        DAILY,
        start_date=pendulum.datetime(2026, 1, 1, tz="America/New_York"),
        end_date=None,
        catchup=False,
        last_logical_date=None,
        now=at(2026, 7, 1, 3),  # 23:00 EDT on 30 June
        timezone="America/New_York",
    )
    assert got == at(2026, 6, 30, 4)


def test_fixed_offset_zones_are_read_as_such() -> None:
    got = next_run_date(
        DAILY,
        start_date=datetime(2026, 1, 1, 12, tzinfo=timezone(timedelta(hours=5, minutes=30))),
        end_date=None,
        catchup=True,
        last_logical_date=None,
        now=at(2026, 2, 1),
        timezone="+05:30",
    )
    assert got == at(2026, 1, 1, 18, 30)
