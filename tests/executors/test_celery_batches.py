"""Which tries travel together to a Celery worker when the broker holds a backlog
(ADR 0051): by queue, up to ``BATCH_TRIES`` a message, never one Celery must time or
revoke alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from tailrace.execution.protocol import RunDagCallback, RunTask
from tailrace.executors.celery import BATCH_TRIES, _Batch, _batched
from tailrace.testing import manual_try


def _try(ti_id: int, **fields: Any) -> RunTask:
    return manual_try("d", f"t{ti_id}", ti_id=ti_id, **fields)


def _shape(items: list[Any]) -> list[Any]:
    return [[t.ti_id for t in i.tries] if isinstance(i, _Batch) else i.ti_id for i in items]


def test_a_backlog_goes_by_queue_in_batches_of_at_most_batch_tries() -> None:
    tries = [_try(i) for i in range(BATCH_TRIES + 2)] + [_try(100, queue="heavy")]
    assert _shape(_batched(tries)) == [
        list(range(BATCH_TRIES)),
        [BATCH_TRIES, BATCH_TRIES + 1],
        100,
    ]


def test_timed_resumed_tries_and_callbacks_go_alone() -> None:
    callback = RunDagCallback(
        callback_id=1,
        dag_id="d",
        fileloc="/dags/d.py",
        kind="success",
        reason="success",
        dag_run=manual_try("d", "t").dag_run,
        log_path="",
    )
    timed, resumed = _try(1, execution_timeout=30.0), _try(2, next_method="execute_complete")
    items = _batched([timed, _try(3), resumed, callback, _try(4)])
    assert items[:3] == [timed, resumed, callback]
    assert _shape(items[3:]) == [[3, 4]]


def test_a_worker_imports_the_task_runner_before_its_pool_forks(tmp_path: Path) -> None:
    """Celery's ``worker_init`` (in a worker's main process, before the pool starts) imports
    the runner: every pool process starts with it, and its first try does not import it.
    In a fresh interpreter, so what this test process imported does not count."""
    program = f"""
import sys
from celery.signals import worker_init
from tailrace.config import load_settings
from tailrace.executors.celery import celery_app

settings = load_settings({{"TAILRACE_HOME": {str(tmp_path)!r},
                          "TAILRACE_CELERY_BROKER_URL": "redis://127.0.0.1:1/0"}})
celery_app(settings)
modules = ("tailrace.execution._remote", "pendulum", "tailrace.sdk.execution")
print(*(m in sys.modules for m in modules))
worker_init.send(sender=None)
print(*(m in sys.modules for m in modules))
"""
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    before, after = done.stdout.splitlines()
    # None of them is imported by the app itself: each comes with worker_init.
    assert before.split() == ["False", "False", "False"]
    assert after.split() == ["True", "True", "True"]
