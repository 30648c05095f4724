"""The local executor's I/O thread survives what its workers and its owner do wrong."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tailrace.execution import RunTask, TaskFinished, TaskStarted
from tailrace.execution.protocol import WorkerReply, WorkerRequest, XComReply
from tailrace.executors import ExecutorEvent, LocalExecutor
from tailrace.testing import manual_try, wait_for

DAG = """
from datetime import datetime
from tailrace import dag, task, get_current_context

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def io():
    @task
    def pulls():
        return get_current_context()["ti"].xcom_pull(task_ids="elsewhere")

    @task
    def plain():
        return 1

    pulls()
    plain()

io()
"""


def _job(path: Path, logs: Path, ti_id: int, task_id: str) -> RunTask:
    return manual_try(
        "io", task_id, ti_id=ti_id, fileloc=str(path), log_path=str(logs / f"{ti_id}.log")
    )


class Owner:
    """What a scheduler gives the executor: an inbox, and answers from a database."""

    def __init__(self, answer: WorkerReply | Exception) -> None:
        self.events: queue.SimpleQueue[ExecutorEvent] = queue.SimpleQueue()
        self.answer = answer
        self.fatal: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.other_events: list[ExecutorEvent] = []

    def xcoms(self, request: WorkerRequest) -> WorkerReply:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def finished(self, count: int) -> dict[int, TaskFinished]:
        done: dict[int, TaskFinished] = {}
        while len(done) < count:
            event = self.events.get(timeout=60)
            if isinstance(event, TaskFinished):
                done[event.ti_id] = event
            else:
                self.other_events.append(event)
        return done


@pytest.fixture
def dag_file(tmp_path: Path) -> Path:
    path = tmp_path / "io.py"
    path.write_text(textwrap.dedent(DAG))
    return path


@contextlib.contextmanager
def _executor(owner: Owner, processes: int) -> Iterator[LocalExecutor]:
    executor = LocalExecutor(processes)
    executor.on_fatal = owner.fatal.put
    executor.start(owner.events.put, owner.xcoms)
    try:
        yield executor
    finally:
        executor.stop()


def test_a_request_the_owner_cannot_answer_fails_only_the_task_that_asked(
    dag_file: Path, tmp_path: Path
) -> None:
    owner = Owner(RuntimeError("database is locked"))
    with _executor(owner, 1) as executor:
        executor.queue_workloads(
            [_job(dag_file, tmp_path, 1, "pulls"), _job(dag_file, tmp_path, 2, "plain")]
        )
        done = owner.finished(2)
        assert done[1].outcome == "failed"
        assert done[1].error is not None and "database is locked" in done[1].error
        assert "database is locked" in (tmp_path / "1.log").read_text()
        assert done[2].outcome == "success"
        assert executor.loop_faults == 0
        assert owner.fatal.empty()


def test_a_workload_whose_worker_died_before_beginning_it_runs_on_another(
    dag_file: Path, tmp_path: Path
) -> None:
    owner = Owner(XComReply(rows=[]))
    with _executor(owner, 1) as executor:
        (first_pid,) = executor.worker_pids
        assert first_pid is not None
        # Stopped, the worker cannot begin the job it is sent; then it dies.
        os.kill(first_pid, signal.SIGSTOP)
        executor.queue_workloads([_job(dag_file, tmp_path, 1, "plain")])
        wait_for(lambda: executor.peak_busy == 1)
        os.kill(first_pid, signal.SIGKILL)
        assert owner.finished(1)[1].outcome == "success"
        assert first_pid not in executor.worker_pids


def test_a_workload_terminated_before_it_began_is_not_run_elsewhere(
    dag_file: Path, tmp_path: Path
) -> None:
    owner = Owner(XComReply(rows=[]))
    with _executor(owner, 1) as executor:
        (first_pid,) = executor.worker_pids
        assert first_pid is not None
        os.kill(first_pid, signal.SIGSTOP)
        executor.queue_workloads([_job(dag_file, tmp_path, 1, "plain")])
        wait_for(lambda: executor.peak_busy == 1)
        executor.terminate([1])  # a user cleared the task
        finished = owner.finished(1)[1]
        assert finished.outcome == "failed"
        assert finished.error is not None and "cleared or marked" in finished.error
        assert not any(isinstance(e, TaskStarted) for e in owner.other_events)


def test_an_owner_that_keeps_failing_is_fatal_not_a_silent_dead_thread(
    dag_file: Path, tmp_path: Path
) -> None:
    owner = Owner(XComReply(rows=[]))
    seen: list[ExecutorEvent] = []

    def broken_inbox(event: ExecutorEvent) -> None:
        seen.append(event)
        raise RuntimeError("inbox closed")

    executor = LocalExecutor(1)
    executor.on_fatal = owner.fatal.put
    executor.start(broken_inbox, owner.xcoms)
    try:
        executor.queue_workloads([_job(dag_file, tmp_path, i, "plain") for i in range(1, 4)])
        reason = owner.fatal.get(timeout=60)
        assert "inbox closed" in reason and "5 times" in reason
        assert executor.loop_faults == 5
        assert any(isinstance(e, TaskStarted) for e in seen)
    finally:
        executor.stop()


def test_a_try_that_asks_its_owner_once_the_executor_stops_ends_its_worker_unkilled(
    dag_file: Path, tmp_path: Path
) -> None:
    # A scheduler stopping (SIGTERM, a test's teardown) stops its executor's I/O thread
    # first; a try asking for an XCom after that used to wait for an answer until the
    # worker was killed 5 s later.
    owner = Owner(XComReply(rows=[]))
    executor = LocalExecutor(1)
    executor.start(owner.events.put, owner.xcoms)
    (worker,) = executor._workers
    os.kill(worker.process.pid, signal.SIGSTOP)  # it will read its try only once stopping
    executor.queue_workloads([_job(dag_file, tmp_path, 1, "pulls")])
    wait_for(lambda: executor.peak_busy == 1)
    stopping = threading.Thread(target=executor.stop)
    stopping.start()
    wait_for(lambda: executor._thread is not None and not executor._thread.is_alive())
    os.kill(worker.process.pid, signal.SIGCONT)
    stopping.join()
    assert worker.process.exitcode == 0  # ended by its broken pipe, not by SIGKILL (-9)
