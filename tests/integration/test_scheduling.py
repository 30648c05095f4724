"""Scheduled runs, driven by a fake clock through the real scheduler."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from tailrace.db.models import DagRun
from tailrace.testing import DagHarness, FakeClock

WriteDag = Callable[[str, str], Path]

HOURLY = """
from datetime import datetime
from tailrace import dag, task

@dag(schedule="@hourly", start_date=datetime(2026, 1, 1), catchup={catchup}, max_active_runs={mar})
def hourly():
    @task
    def tick():
        return 1
    tick()

hourly()
"""


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2026, 1, 1, 3, 30, tzinfo=UTC))


def runs(h: DagHarness) -> list[DagRun]:
    with h.engine.connect() as conn:
        return list(conn.execute(select(DagRun).order_by(DagRun.logical_date)).all())


def finished_runs(h: DagHarness) -> int:
    return sum(1 for r in runs(h) if r.state in ("success", "failed"))


def hours(h: DagHarness) -> list[int]:
    return [r.logical_date.hour for r in runs(h)]


def test_catchup_runs_every_missed_moment_then_the_next_when_it_comes(
    clocked: DagHarness, write_dag: WriteDag, clock: FakeClock
) -> None:
    write_dag("hourly.py", HOURLY.format(catchup=True, mar=16))
    clocked.parse()
    assert clocked.scheduler.run_until(lambda: finished_runs(clocked) == 4, timeout=60)
    assert hours(clocked) == [0, 1, 2, 3]
    assert {r.run_type for r in runs(clocked)} == {"scheduled"}
    clock.advance(timedelta(hours=1))
    assert clocked.scheduler.run_until(lambda: finished_runs(clocked) == 5, timeout=60)
    assert hours(clocked) == [0, 1, 2, 3, 4]


def test_without_catchup_only_the_latest_moment_runs(
    clocked: DagHarness, write_dag: WriteDag, clock: FakeClock
) -> None:
    write_dag("hourly.py", HOURLY.format(catchup=False, mar=16))
    clocked.parse()
    assert clocked.scheduler.run_until(lambda: finished_runs(clocked) == 1, timeout=60)
    assert hours(clocked) == [3]
    # Down for five hours: still only the latest moment.
    clock.advance(timedelta(hours=5))
    assert clocked.scheduler.run_until(lambda: finished_runs(clocked) == 2, timeout=60)
    assert hours(clocked) == [3, 8]


def test_max_active_runs_runs_catchup_one_at_a_time_without_spinning(
    clocked: DagHarness, write_dag: WriteDag
) -> None:
    write_dag("hourly.py", HOURLY.format(catchup=True, mar=1))
    clocked.parse()
    assert clocked.scheduler.run_until(lambda: finished_runs(clocked) == 4, timeout=60)
    assert hours(clocked) == [0, 1, 2, 3]
    spans = [(r.start_date, r.end_date) for r in runs(clocked)]
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert end <= start, f"runs overlapped: {spans}"
    # Nothing is due: the next wake-up is the next moment, not "now, again".
    next_timer = clocked.scheduler._next_timer
    assert next_timer is not None and next_timer > clocked.clock()


def test_paused_dags_get_no_scheduled_runs(clocked: DagHarness, write_dag: WriteDag) -> None:
    from sqlalchemy import update

    from tailrace.db.models import Dag

    write_dag("hourly.py", HOURLY.format(catchup=True, mar=16))
    clocked.parse()
    with clocked.engine.begin() as conn:
        conn.execute(update(Dag).values(is_paused=True))
    for _ in range(3):
        clocked.scheduler.step()
    assert runs(clocked) == []
