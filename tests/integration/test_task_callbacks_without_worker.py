"""Task callbacks of tries that end without a worker (ADR 0033): a deferral that times
out, a trigger that fails a task started in the triggerer, a worker killed mid-try. The
scheduler records the callback with the try's end, and a worker runs it with the try's
context; a try a worker finished is never called back twice."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import select
from test_callbacks import HEADER as CALLBACK_HEADER  # this folder is on sys.path
from test_callbacks import calls

from tailrace.db.models import DagCallback, TaskInstance
from tailrace.testing import DagHarness, wait_for

WriteDag = Callable[[str, str], Path]

# The callbacks record what they were called with, as in test_callbacks; ENDS are the
# end-of-try ones (on_execute_callback runs in a worker, whatever happens next).
HEADER = (
    CALLBACK_HEADER
    + """
import threading
from tailrace import BaseTrigger, StartTriggerArgs

ENDS = {{k: v for k, v in ALL.items() if k != "on_execute_callback"}}
"""
)


def kinds(out: Path) -> list[tuple[str, str, int]]:
    return [(c["kind"], c["task"], c["try"]) for c in calls(out)]


def test_a_deferral_that_times_out_calls_retry_then_failure_callbacks_in_a_worker(
    harness: DagHarness, write_dag: WriteDag, tmp_path: Path
) -> None:
    out = tmp_path / "calls.jsonl"
    write_dag(
        "cb_timeout.py",
        HEADER.format(out=str(out))
        + """
@dag(schedule=None, start_date=START)
def cb_timeout():
    @task(retries=1, retry_delay=timedelta(0), **ENDS)
    def waits(event=None):
        defer(DateTimeTrigger(datetime.now(UTC) + timedelta(days=1)), timeout=0.3)

    waits()

cb_timeout()
""",
    )
    harness.parse()
    pk = harness.trigger("cb_timeout")
    assert harness.run(pk)["state"] == "failed"
    callbacks = harness.dag_callbacks(pk)
    assert [(c["kind"], c["state"]) for c in callbacks] == [
        ("retry", "success"),
        ("failure", "success"),
    ]
    # Two workers may run the two callbacks at once: in either order.
    assert sorted(kinds(out), key=lambda k: k[2]) == [
        ("retry", "waits", 1),
        ("failure", "waits", 2),
    ]
    for call in calls(out):
        assert call["exception"].startswith("TryEndedWithoutWorker: the deferral timed out")
        assert call["run_id"] == harness.summary(pk)["run_id"]
    # What the callback did is in the try's own log, after the try's end.
    log = harness.log(pk, "waits", try_number=2)
    assert "Calling on_failure_callback of task cb_timeout.waits" in log
    assert "try 2 ended without a worker" in log


def test_a_trigger_that_fails_a_task_started_in_the_triggerer_calls_its_failure_callback(
    harness: DagHarness, write_dag: WriteDag, tmp_path: Path
) -> None:
    out = tmp_path / "calls.jsonl"
    write_dag(
        "cb_trigger.py",
        HEADER.format(out=str(out))
        + """
class Broken(BaseTrigger):
    def serialize(self):
        return (f"{__name__}.Broken", {})

    async def run(self):
        raise RuntimeError("the source refused the credentials")
        yield


class FromTrigger(BaseOperator):
    start_from_trigger = True
    start_trigger_args = StartTriggerArgs(trigger_cls=f"{__name__}.Broken", trigger_kwargs={})

    def execute(self, context):
        raise AssertionError("never runs on a worker")


@dag(schedule=None, start_date=START)
def cb_trigger():
    FromTrigger(task_id="from_trigger", **ENDS)

cb_trigger()
""",
    )
    harness.parse()
    pk = harness.trigger("cb_trigger")
    assert harness.run(pk)["state"] == "failed"
    assert [c["state"] for c in harness.dag_callbacks(pk)] == ["success"]
    (call,) = calls(out)
    assert (call["kind"], call["task"], call["try"]) == ("failure", "from_trigger", 1)
    assert "the source refused the credentials" in call["exception"]


VICTIM = """
@dag(schedule=None, start_date=START)
def cb_victim():
    @task(retries=1, retry_delay=timedelta(0), **ENDS)
    def hang_on_first_try(**context):
        if context["ti"].try_number == 1:
            threading.Event().wait()
        return "second try survived"

    hang_on_first_try()

cb_victim()
"""


def _callbacks_ended(harness: DagHarness, dag_run_id: int) -> bool:
    with harness.engine.connect() as conn:
        states = conn.scalars(
            select(DagCallback.state).where(DagCallback.dag_run_id == dag_run_id)
        ).all()
    return bool(states) and all(s in ("success", "failed") for s in states)


def test_a_worker_killed_mid_try_has_its_retry_callback_called_once_by_another(
    harness: DagHarness, write_dag: WriteDag, tmp_path: Path
) -> None:
    out = tmp_path / "calls.jsonl"
    write_dag("cb_victim.py", HEADER.format(out=str(out)) + VICTIM)
    harness.parse()
    with harness.running():
        pk = harness.trigger("cb_victim")

        def running_pid() -> int | None:
            with harness.engine.connect() as conn:
                row = conn.execute(
                    select(TaskInstance.state, TaskInstance.pid).where(
                        TaskInstance.dag_run_id == pk
                    )
                ).one()
            return row.pid if row.state == "running" else None

        pid = wait_for(running_pid)
        assert isinstance(pid, int)
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: harness.is_finished(pk))
        # The retry callback runs while the scheduler does: leaving this block stops the
        # worker pool, and a callback it was running would be lost with it.
        wait_for(lambda: _callbacks_ended(harness, pk), timeout=60)
    assert harness.summary(pk)["state"] == "success"
    callbacks = harness.dag_callbacks(pk)
    # The killed try's retry callback, run by a worker; the second try's success callback
    # ran in the worker that ran the try, so it is not recorded for another.
    assert [(c["kind"], c["state"]) for c in callbacks] == [("retry", "success")]
    assert sorted(kinds(out), key=lambda k: k[2]) == [
        ("retry", "hang_on_first_try", 1),
        ("success", "hang_on_first_try", 2),
    ]
    (retried,) = [c for c in calls(out) if c["kind"] == "retry"]
    assert "exit code -9" in retried["exception"]
