"""The scheduler's inbox: how long a collect gathers reports before a step."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Engine
from test_transitions import RecordingExecutor  # the test plays the workers

from tailrace.dag_processing._parse import ParsedFile
from tailrace.dag_processing.processor import sync_parsed
from tailrace.dagrun import trigger_dag_run
from tailrace.execution import TaskFinished
from tailrace.scheduler import Scheduler, _inbox
from tailrace.scheduler._inbox import Inbox
from tailrace.serialization import SerializedDag, SerializedSchedule, SerializedTask, dumps
from tailrace.testing import FakeClock

NOW = datetime(2026, 12, 3, 12, tzinfo=UTC)


def finished(ti_id: int) -> TaskFinished:
    return TaskFinished(ti_id=ti_id, try_number=1, outcome="success", start_date=NOW, end_date=NOW)


def test_with_the_executor_full_a_collect_gathers_reports_arriving_after_it_began(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A long window, ended by the wake-up the other thread sends after its report.
    monkeypatch.setattr(_inbox, "SATURATED_COALESCE_SECONDS", 60.0)
    inbox = Inbox()
    inbox.put(finished(1))

    def report_once_taken() -> None:
        while not inbox.empty():  # the collect took the first report
            pass
        inbox.put(finished(2))
        inbox.wake()

    worker = threading.Thread(target=report_once_taken)
    worker.start()
    collected = inbox.collect(0, saturated=True)
    worker.join()
    assert [e.ti_id for e in collected.events] == [1, 2]  # type: ignore[union-attr]
    assert collected.woken


def test_with_slots_free_a_collect_takes_what_is_there_and_returns() -> None:
    inbox = Inbox()
    inbox.put(finished(1))
    collected = inbox.collect(0)
    assert [e.ti_id for e in collected.events] == [1]  # type: ignore[union-attr]
    assert inbox.empty()


@pytest.mark.parametrize("db_backend", ["sqlite"])
def test_a_step_that_found_every_executor_slot_taken_says_so(
    engine: Engine, tmp_path: Path
) -> None:
    dag = SerializedDag(
        dag_id="wide",
        fileloc="/nowhere/wide.py",
        schedule=SerializedSchedule(kind="none"),
        tasks=[SerializedTask(task_id=f"t{i}", operator="Op") for i in range(3)],
    )
    with engine.begin() as conn:
        sync_parsed(
            conn, "/nowhere", [ParsedFile(path=dag.fileloc, dags={"wide": dumps(dag)})], NOW
        )
    executor = RecordingExecutor()
    scheduler = Scheduler(
        engine,
        executor,
        log_folder=tmp_path / "logs",
        poll_interval=3600,
        clock=FakeClock(NOW),
        parallelism=2,
    )
    scheduler.start()
    try:
        assert not scheduler._executor_full
        trigger_dag_run(engine, "wide", {})
        scheduler.wake()
        scheduler.step()
        # Two of three ran: the third found the executor's two slots taken.
        assert len(executor.workloads) == 2
        assert scheduler._executor_full
    finally:
        scheduler.stop()
