"""The scheduler's inbox: how long a collect gathers reports before a step."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Engine
from test_transitions import RecordingExecutor  # the test plays the workers

from tailrace.dag_processing._parse import ParsedFile
from tailrace.dag_processing.processor import sync_parsed
from tailrace.dagrun import trigger_dag_run
from tailrace.execution import TaskFinished, TaskStarted
from tailrace.scheduler import Scheduler, _inbox
from tailrace.scheduler._inbox import Inbox
from tailrace.serialization import SerializedDag, SerializedSchedule, SerializedTask, dumps
from tailrace.testing import FakeClock

NOW = datetime(2026, 12, 3, 12, tzinfo=UTC)


def finished(ti_id: int) -> TaskFinished:
    return TaskFinished(ti_id=ti_id, try_number=1, outcome="success", start_date=NOW, end_date=NOW)


def test_with_the_executor_full_a_collect_gathers_reports_arriving_after_it_began() -> None:
    # A long window, ended by the wake-up the other thread sends after its report.
    inbox = Inbox()
    inbox.put(finished(1))

    def report_once_taken() -> None:
        while not inbox.empty():  # the collect took the first report
            pass
        inbox.put(finished(2))
        inbox.wake()

    worker = threading.Thread(target=report_once_taken)
    worker.start()
    collected = inbox.collect(0, gather=60.0)
    worker.join()
    assert [e.ti_id for e in collected.events] == [1, 2]  # type: ignore[union-attr]
    assert collected.woken


def test_with_slots_free_a_collect_takes_what_is_there_and_returns() -> None:
    inbox = Inbox()
    inbox.put(finished(1))
    collected = inbox.collect(0)
    assert [e.ti_id for e in collected.events] == [1]  # type: ignore[union-attr]
    assert inbox.empty()


def test_a_remote_report_waited_for_still_gathers_with_the_executor_full() -> None:
    # Runs changed (a remote worker's report) wait for one more notice; with a backlog the
    # collect goes on gathering after it, until the wake-up.
    inbox = Inbox()
    inbox.runs_changed([1])

    def report_twice_once_taken() -> None:
        while not inbox.empty():
            pass
        inbox.runs_changed([2])
        while not inbox.empty():
            pass
        inbox.runs_changed([3])
        inbox.wake()

    worker = threading.Thread(target=report_twice_once_taken)
    worker.start()
    collected = inbox.collect(0, gather=60.0)
    worker.join()
    assert collected.changed_runs == {1, 2, 3}


class RemoteRecordingExecutor(RecordingExecutor):
    remote = True


@contextlib.contextmanager
def _wide_run_stepped(
    engine: Engine, tmp_path: Path, executor: RecordingExecutor
) -> Iterator[Scheduler]:
    """A scheduler that has stepped once over a new run of three tasks, with two slots."""
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
        assert scheduler._gather_seconds == 0.0
        trigger_dag_run(engine, "wide", {})
        scheduler.wake()
        scheduler.step()
        # Two of three ran: the third found the executor's two slots taken.
        assert len(executor.workloads) == 2
        yield scheduler
    finally:
        scheduler.stop()


@pytest.mark.parametrize("db_backend", ["sqlite"])
def test_a_step_that_found_every_executor_slot_taken_gathers_reports_next(
    engine: Engine, tmp_path: Path
) -> None:
    with _wide_run_stepped(engine, tmp_path, RecordingExecutor()) as scheduler:
        assert scheduler._gather_seconds == _inbox.SATURATED_COALESCE_SECONDS


@pytest.mark.parametrize("db_backend", ["sqlite"])
def test_a_remote_executor_with_tries_waiting_in_its_broker_gathers_longer(
    engine: Engine, tmp_path: Path
) -> None:
    executor = RemoteRecordingExecutor()
    with _wide_run_stepped(engine, tmp_path, executor) as scheduler:
        # Both tries sent wait in the broker, no worker has started one: a worker that
        # frees up takes one of them, so the next step can wait for more reports.
        sent = executor.take()
        assert scheduler._gather_seconds == _inbox.BACKLOG_COALESCE_SECONDS
        # Workers started both: the broker holds nothing for the next free worker, which
        # waits for the next step's dispatch.
        for workload in sent:
            scheduler.inbox.put(
                TaskStarted(
                    ti_id=workload.ti_id,
                    try_number=workload.try_number,
                    pid=1,
                    hostname="far-away",
                    start_date=NOW,
                )
            )
        scheduler.step()
        assert scheduler._gather_seconds == _inbox.SATURATED_COALESCE_SECONDS
