"""Processes die: a task is never left running forever, and the pool heals."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from tailrace.db.models import TaskInstance, TaskInstanceHistory
from tailrace.testing import DagHarness, wait_for

WriteDag = Callable[[str, str], Path]

VICTIM = """
import threading
from datetime import datetime, timedelta
from tailrace import dag, task, get_current_context

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def victim():
    @task(retries=1, retry_delay=timedelta(0))
    def hang_on_first_try():
        if get_current_context()["ti"].try_number == 1:
            threading.Event().wait()
        return "second try survived"

    hang_on_first_try()

victim()
"""


@pytest.fixture
def running_scheduler(harness: DagHarness) -> Iterator[DagHarness]:
    with harness.running():
        yield harness


def test_kill_9_of_a_worker_fails_the_try_retries_and_replaces_the_worker(
    running_scheduler: DagHarness, write_dag: WriteDag
) -> None:
    h = running_scheduler
    write_dag("victim.py", VICTIM)
    h.parse()
    pk = h.trigger("victim")

    def running_pid() -> int | None:
        with h.engine.connect() as conn:
            row = conn.execute(
                select(TaskInstance.state, TaskInstance.pid).where(TaskInstance.dag_run_id == pk)
            ).one()
        return row.pid if row.state == "running" else None

    pid = wait_for(running_pid)
    assert isinstance(pid, int)
    pids_before = set(h.executor.worker_pids)
    assert pid in pids_before
    os.kill(pid, signal.SIGKILL)

    wait_for(lambda: h.is_finished(pk))
    summary = h.summary(pk)
    assert summary["state"] == "success"
    (ti,) = summary["task_instances"]
    assert ti["try_number"] == 2
    with h.engine.connect() as conn:
        first = conn.execute(
            select(TaskInstanceHistory).where(TaskInstanceHistory.try_number == 1)
        ).one()
    assert first.state == "failed"
    assert f"pid {pid}" in first.error and "exit code -9" in first.error
    assert "exit code -9" in h.log(pk, "hang_on_first_try", try_number=1)
    pids_after = set(h.executor.worker_pids)
    assert pid not in pids_after
    assert len(pids_after) == len(pids_before)
