"""A run's end frees a ``max_active_runs`` slot: the run waiting for it is made or started
in the same scheduler step, and a run whose DAG has nobody waiting costs no such look."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from tailrace.clock import utcnow
from tailrace.db.models import DagRun
from tailrace.scheduler import _loop
from tailrace.store.assets import NewAssetEvent, record_events
from tailrace.testing import DagHarness

WriteDag = Callable[[str, str], Path]

DAGS = """
from datetime import datetime
from tailrace import Asset, dag, task

ticks = Asset("ticks")


@dag(schedule=ticks, max_active_runs=1)
def on_ticks():
    @task
    def go():
        pass

    go()


on_ticks()


@dag(schedule=None, start_date=datetime(2026, 1, 1), max_active_runs=1)
def one_at_a_time():
    @task
    def go():
        pass

    go()


one_at_a_time()


@dag(schedule=None, start_date=datetime(2026, 1, 1), max_active_runs=16)
def roomy():
    @task
    def go():
        pass

    go()


roomy()
"""


def _runs(harness: DagHarness, dag_id: str) -> list[Any]:
    with harness.engine.connect() as conn:
        return conn.execute(
            select(DagRun.id, DagRun.state, DagRun.queued_at, DagRun.start_date, DagRun.end_date)
            .where(DagRun.dag_id == dag_id)
            .order_by(DagRun.id)
        ).all()


def _tick(harness: DagHarness, n: int) -> None:
    with harness.engine.begin() as conn:
        record_events(conn, [NewAssetEvent(name="ticks", extra={"n": n})], utcnow())
    harness.scheduler.wake()


def _step_until(harness: DagHarness, done: Callable[[], bool], what: str) -> None:
    harness.start()
    assert harness.scheduler.run_until(done, timeout=60), f"timed out waiting for {what}"


def test_queued_asset_events_get_their_run_in_the_step_the_running_one_ends(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag("slots.py", DAGS)
    harness.parse()
    _tick(harness, 1)
    # The step that makes the first run also sends its task out; its end is applied by
    # a later step, so the second event is queued while the first run still runs.
    _step_until(
        harness,
        lambda: [r.state for r in _runs(harness, "on_ticks")] == ["running"],
        "the first run to start",
    )
    _tick(harness, 2)
    _step_until(harness, lambda: len(_runs(harness, "on_ticks")) == 2, "the second run")
    first, second = _runs(harness, "on_ticks")
    assert first.state == "success"
    # Made by the step that ended the first run (one `now`), not by a later look around.
    assert second.queued_at == first.end_date


def test_a_queued_run_starts_in_the_step_the_running_one_ends(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag("slots.py", DAGS)
    harness.parse()
    harness.trigger("one_at_a_time")
    harness.trigger("one_at_a_time")
    _step_until(
        harness,
        lambda: [r.state for r in _runs(harness, "one_at_a_time")] == ["success", "running"],
        "the second run to start",
    )
    first, second = _runs(harness, "one_at_a_time")
    assert second.start_date == first.end_date


def test_a_run_ending_with_nobody_waiting_for_its_slot_looks_for_no_runs(
    harness: DagHarness, write_dag: WriteDag, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_dag("slots.py", DAGS)
    harness.parse()
    # Spies, passing every call through: the steps as they begin, and the steps that
    # looked for queued runs to start.
    steps: list[Any] = []
    looked: list[int] = []
    begin, start_queued_runs = _loop.Scheduler._begin, _loop.start_queued_runs

    def spied_begin(self: Any, collected: Any) -> Any:
        steps.append(begin(self, collected))
        return steps[-1]

    def spied_start(*args: Any, **kwargs: Any) -> Any:
        looked.append(len(steps) - 1)
        return start_queued_runs(*args, **kwargs)

    monkeypatch.setattr(_loop.Scheduler, "_begin", spied_begin)
    monkeypatch.setattr(_loop, "start_queued_runs", spied_start)
    harness.trigger("roomy")
    _step_until(
        harness, lambda: [r.state for r in _runs(harness, "roomy")] == ["success"], "the run"
    )
    (ended,) = [i for i, step in enumerate(steps) if "roomy" in step.finished_dags]
    assert looked, "no step looked for queued runs: the spy saw nothing"
    # The step that ended the run looked only if it was a look around anyway.
    assert ended not in looked or steps[ended].look_around
