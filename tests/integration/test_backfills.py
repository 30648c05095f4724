"""Backfills through the real scheduler, as Airflow 3 runs them: runs of type backfill
for the range's logical dates, at most the backfill's max_active_runs at once (apart from
the DAG's), in order (or backwards), reprocessing as asked, paused and cancelled."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from tailrace import actions, backfills
from tailrace.backfills import BackfillRequest, ReprocessBehavior
from tailrace.db.models import DagRun
from tailrace.errors import BackfillCompletedError, BackfillError, BackfillRunningError
from tailrace.notify import Wakeups
from tailrace.testing import DagHarness

WriteDag = Callable[[str, str], Path]

SOURCE = """
import os
from datetime import datetime
from tailrace import dag, task

FAIL = {fail!r}


# No scheduled runs: the schedule ended before the backfilled days.
@dag(schedule="@daily", start_date=datetime(2026, 1, 1), end_date=datetime(2026, 2, 1),
     max_active_runs=1{extra})
def daily():
    @task{task_args}
    def work(ds=None):
        if os.path.exists(FAIL) and ds == "2026-11-03":
            raise RuntimeError("fails on purpose")
        return ds

    work()


daily()
"""

NOV_1 = datetime(2026, 11, 1, tzinfo=UTC)
NOV_5 = datetime(2026, 11, 5, tzinfo=UTC)
DAYS = [f"2026-11-0{d}" for d in range(1, 6)]


@pytest.fixture
def daily(harness: DagHarness, write_dag: WriteDag, tmp_path: Path) -> Path:
    fail = tmp_path / "fail"
    write_dag("daily.py", SOURCE.format(fail=str(fail), extra="", task_args=""))
    harness.parse()
    return fail


def _wakeups(harness: DagHarness, tmp_path: Path) -> Wakeups:
    wakeups = Wakeups(tmp_path / "home", harness.engine)
    wakeups.listen("scheduler", harness.scheduler.wake)
    return wakeups


def _runs(harness: DagHarness) -> list[Any]:
    with harness.engine.connect() as conn:
        return list(
            conn.execute(
                select(DagRun).where(DagRun.dag_id == "daily").order_by(DagRun.logical_date)
            ).all()
        )


def _all_finished(harness: DagHarness, count: int) -> Callable[[], bool]:
    def done() -> bool:
        runs = _runs(harness)
        return len(runs) == count and all(r.state in ("success", "failed") for r in runs)

    return done


def _most_at_once(runs: list[Any]) -> int:
    """The most runs that were running at one moment (from their start and end; a run
    that ended when another started did not overlap it)."""
    moments = sorted(
        [(r.start_date, 1) for r in runs] + [(r.end_date, -1) for r in runs],
        key=lambda m: (m[0], m[1]),
    )
    running = most = 0
    for _, change in moments:
        running += change
        most = max(most, running)
    return most


def _create(harness: DagHarness, wakeups: Wakeups, **kwargs: Any) -> Any:
    request = BackfillRequest(dag_id="daily", from_date=NOV_1, to_date=NOV_5, **kwargs)
    return actions.create_backfill(harness.engine, wakeups, request)


def test_a_backfill_runs_each_day_as_backfill_runs_at_most_max_active_runs_at_once(
    harness: DagHarness, daily: Path, tmp_path: Path
) -> None:
    wakeups = _wakeups(harness, tmp_path)
    try:
        created = _create(harness, wakeups, max_active_runs=2)
        assert created.max_active_runs == 2 and created.completed_at is None
        assert harness.scheduler.run_until(_all_finished(harness, 5), timeout=120)
    finally:
        wakeups.close()
    runs = _runs(harness)
    assert [r.logical_date.date().isoformat() for r in runs] == DAYS
    assert {r.run_type for r in runs} == {"backfill"}
    assert {r.backfill_id for r in runs} == {created.id}
    assert runs[0].run_id == "backfill__2026-11-01T00:00:00+00:00"
    assert {r.state for r in runs} == {"success"}
    # Two at once (the backfill's limit), though the DAG's max_active_runs is 1.
    assert _most_at_once(runs) == 2
    # Started oldest first.
    assert [r.id for r in sorted(runs, key=lambda r: (r.start_date, r.id))] == [r.id for r in runs]
    assert backfills.get_backfill(harness.engine, created.id).completed_at is not None


def test_run_backwards_starts_the_latest_day_first(
    harness: DagHarness, daily: Path, tmp_path: Path
) -> None:
    wakeups = _wakeups(harness, tmp_path)
    try:
        _create(harness, wakeups, max_active_runs=1, run_backwards=True)
        assert harness.scheduler.run_until(_all_finished(harness, 5), timeout=120)
    finally:
        wakeups.close()
    runs = _runs(harness)
    assert _most_at_once(runs) == 1
    started = [r.logical_date.date().isoformat() for r in sorted(runs, key=lambda r: r.start_date)]
    assert started == DAYS[::-1]


def test_reprocess_behavior_decides_which_existing_runs_run_again(
    harness: DagHarness, daily: Path, tmp_path: Path
) -> None:
    daily.touch()  # the 3rd fails
    wakeups = _wakeups(harness, tmp_path)
    try:
        first = _create(harness, wakeups)
        assert harness.scheduler.run_until(_all_finished(harness, 5), timeout=120)
        states = {r.logical_date.day: r.state for r in _runs(harness)}
        assert states == {1: "success", 2: "success", 3: "failed", 4: "success", 5: "success"}

        # "none" would create nothing: every day has a run.
        request = BackfillRequest("daily", NOV_1, NOV_5)
        assert backfills.dry_run(harness.engine, request, datetime.now(UTC)) == []
        failed_only = BackfillRequest(
            "daily", NOV_1, NOV_5, reprocess_behavior=ReprocessBehavior.FAILED
        )
        assert backfills.dry_run(harness.engine, failed_only, datetime.now(UTC)) == [
            datetime(2026, 11, 3, tzinfo=UTC)
        ]

        daily.unlink()
        second = _create(harness, wakeups, reprocess_behavior=ReprocessBehavior.FAILED)
        assert harness.scheduler.run_until(_all_finished(harness, 5), timeout=120)
    finally:
        wakeups.close()
    runs = {r.logical_date.day: r for r in _runs(harness)}
    assert {day: r.state for day, r in runs.items()} == dict.fromkeys(range(1, 6), "success")
    # The failed run was cleared and run again as the second backfill's; the others stay
    # the first's.
    assert runs[3].backfill_id == second.id
    assert {runs[d].backfill_id for d in (1, 2, 4, 5)} == {first.id}
    with harness.engine.connect() as conn:
        from tailrace.store import backfills as store

        outcomes = store.dates(conn, second.id)
    assert [o["exception_reason"] for o in outcomes] == [
        "already exists",
        "already exists",
        None,
        "already exists",
        "already exists",
    ]
    assert outcomes[2]["state"] == "success"


def test_a_paused_backfill_starts_nothing_until_unpaused_and_cancel_fails_queued_runs(
    harness: DagHarness, daily: Path, tmp_path: Path
) -> None:
    wakeups = _wakeups(harness, tmp_path)
    try:
        created = _create(harness, wakeups, max_active_runs=1)
        with pytest.raises(BackfillRunningError, match="already a running backfill"):
            _create(harness, wakeups)
        paused = actions.change_backfill(harness.engine, wakeups, created.id, "pause")
        assert paused.is_paused
        # A step that looks at queued runs starts none of the paused backfill's.
        harness.scheduler.wake()
        harness.scheduler.step()
        assert {r.state for r in _runs(harness)} == {"queued"}

        actions.change_backfill(harness.engine, wakeups, created.id, "unpause")
        assert harness.scheduler.run_until(
            lambda: _runs(harness)[0].state == "success", timeout=120
        )
        cancelled = actions.change_backfill(harness.engine, wakeups, created.id, "cancel")
        assert cancelled.completed_at is not None and cancelled.is_paused
        assert harness.scheduler.run_until(_all_finished(harness, 5), timeout=120)
        # One at a time: at most the second had started; the queued rest failed unrun.
        failed = [r for r in _runs(harness) if r.state == "failed"]
        assert len(failed) >= 3
        assert {harness.states(r.id)["work"] for r in failed} == {None}
        with pytest.raises(BackfillCompletedError):
            actions.change_backfill(harness.engine, wakeups, created.id, "unpause")
        # Complete: another backfill of the DAG may start.
        again = _create(harness, wakeups, reprocess_behavior=ReprocessBehavior.FAILED)
        assert harness.scheduler.run_until(
            lambda: all(r.state == "success" for r in _runs(harness)), timeout=120
        )
    finally:
        wakeups.close()
    # The cancelled runs are the next backfill's now; the others stay the first's.
    owners = {r.id: r.backfill_id for r in _runs(harness)}
    assert {owners.pop(r.id) for r in failed} == {again.id}
    assert set(owners.values()) == {created.id}


def test_what_airflow_refuses_is_refused_with_what_to_do(
    harness: DagHarness, write_dag: WriteDag, tmp_path: Path
) -> None:
    write_dag(
        "daily.py",
        SOURCE.format(fail=str(tmp_path / "f"), extra="", task_args="(depends_on_past=True)"),
    )
    write_dag(
        "manual_only.py",
        "from datetime import datetime\nfrom tailrace import DAG, EmptyOperator\n"
        "with DAG('manual_only', schedule=None, start_date=datetime(2026, 1, 1)):\n"
        "    EmptyOperator(task_id='t')\n",
    )
    harness.parse()
    now = datetime.now(UTC)
    cases = [
        (BackfillRequest("manual_only", NOV_1, NOV_5), "non-periodic schedule"),
        (BackfillRequest("daily", NOV_5, NOV_1), "must not be after"),
        (
            BackfillRequest(
                "daily", datetime(2999, 1, 1, tzinfo=UTC), datetime(2999, 2, 1, tzinfo=UTC)
            ),
            "future dates",
        ),
        (BackfillRequest("daily", NOV_1, NOV_5), "reprocess behavior"),
        (
            BackfillRequest(
                "daily",
                NOV_1,
                NOV_5,
                reprocess_behavior=ReprocessBehavior.FAILED,
                run_backwards=True,
            ),
            "in reverse",
        ),
    ]
    for request, message in cases:
        with pytest.raises(BackfillError, match=message):
            backfills.create_backfill(harness.engine, request, now)
    assert _runs(harness) == []
    # depends_on_past with a reprocess behavior, forwards, is fine.
    allowed = BackfillRequest("daily", NOV_1, NOV_5, reprocess_behavior=ReprocessBehavior.FAILED)
    assert len(backfills.dry_run(harness.engine, allowed, now)) == 5


def test_logical_dates_follow_the_schedule_within_the_range() -> None:
    from tailrace.serialization import SerializedDag, SerializedSchedule

    dag = SerializedDag(
        dag_id="d",
        fileloc="d.py",
        schedule=SerializedSchedule(kind="cron", value="0 6 * * *"),
        tasks=[],
        timezone="Europe/Paris",
    )
    dates = backfills.logical_dates(
        dag, NOV_1, datetime(2026, 11, 3, 5, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)
    )
    # 06:00 in Paris is 05:00 UTC in November; the range's end is included.
    assert dates == [datetime(2026, 11, d, 5, tzinfo=UTC) for d in (1, 2, 3)]
    assert all(b > a for a, b in itertools.pairwise(dates))
