from __future__ import annotations

from datetime import UTC, datetime

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
