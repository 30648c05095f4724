"""A trigger that blocks the event loop is named, measured and moved off the shared loop."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import select

from tailrace.db.models import TaskInstance, Trigger
from tailrace.testing import DagHarness, wait_for

WriteDag = Callable[[str, str], Path]

DAG = """
import asyncio
import time
from datetime import datetime
from pathlib import Path
from tailrace import BaseOperator, BaseTrigger, StartTriggerArgs, TriggerEvent, dag

HERE = Path(__file__).parent


class Ticks(BaseTrigger):
    # A well-behaved stream: an event every 10 ms until told to stop.
    def serialize(self):
        return (f"{__name__}.Ticks", {})

    async def run(self):
        tick = 0
        while not (HERE / "stop").exists():
            yield TriggerEvent({"tick": tick})
            tick += 1
            await asyncio.sleep(0.01)


class Blocker(BaseTrigger):
    # Written as if run() were synchronous: each wait blocks the thread it runs on.
    def serialize(self):
        return (f"{__name__}.Blocker", {})

    async def run(self):
        time.sleep(1.5)
        yield TriggerEvent({"round": 0})
        self.log.info("waiting for the gate")
        while not (HERE / "gate").exists():
            time.sleep(0.01)
        yield TriggerEvent({"round": 1})


class FromTrigger(BaseOperator):
    start_from_trigger = True

    def __init__(self, trigger, **kwargs):
        super().__init__(**kwargs)
        self.start_trigger_args = StartTriggerArgs(
            trigger_cls=f"{__name__}.{trigger}", trigger_kwargs={}
        )

    def execute(self, context):
        raise AssertionError("never runs on a worker")


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def blocking():
    FromTrigger(trigger="Ticks", task_id="ticks", max_pending_events=100_000)
    FromTrigger(trigger="Blocker", task_id="blocker")

blocking()
"""


def test_a_trigger_that_keeps_blocking_is_moved_off_the_loop_and_the_others_keep_streaming(
    harness: DagHarness, write_dag: WriteDag, dags_folder: Path
) -> None:
    write_dag("blocking.py", DAG)
    harness.parse()
    pk = harness.trigger("blocking")

    def events_of(task_id: str) -> int:
        with harness.engine.connect() as conn:
            # Stored events are pruned once consumed: count what the trigger produced.
            return (
                conn.scalar(
                    select(Trigger.next_sequence)
                    .join(TaskInstance, TaskInstance.trigger_id == Trigger.id)
                    .where(TaskInstance.dag_run_id == pk, TaskInstance.task_id == task_id)
                )
                or 0
            )

    with harness.running():
        try:
            # The blocker's first wait (1.5 s) stalls the shared loop: nothing helps that one.
            wait_for(lambda: events_of("blocker") == 1, timeout=30)
            # It now waits on the gate, blocking again; the other stream must go on meanwhile.
            flowing = events_of("ticks")
            wait_for(lambda: events_of("ticks") >= flowing + 50, timeout=20)
            assert events_of("blocker") == 1
        finally:
            (dags_folder / "gate").touch()
            (dags_folder / "stop").touch()
        wait_for(lambda: harness.is_finished(pk), timeout=60)
    assert harness.summary(pk)["state"] == "success"

    text = harness.log(pk, "blocker")
    # Exactly one stall was its doing, on the shared loop; it was moved then.
    (warning,) = [line for line in text.splitlines() if "thread of its own" in line]
    assert "has blocked the triggerer's event loop" in warning
    assert ".Blocker" in warning
    summary = harness.summary(pk)
    assert "blocking.blocker" in warning and summary["run_id"] in warning
    stall = re.search(r"for (\d+\.\d+)s", warning)
    assert stall is not None and float(stall.group(1)) >= 1.4, warning  # the real stall
    # Its own lines still reach its task's log from the thread it was moved to.
    assert "waiting for the gate" in text
    # (A loaded machine may stall the loop while it runs a step of the other one: that
    # warning says so, and blames no trigger.)
    blamed = [
        line
        for line in harness.log(pk, "ticks").splitlines()
        if "blocked" in line and "overloaded" not in line
    ]
    assert blamed == []


def test_a_probe_whose_thread_clock_is_gone_reads_no_cpu_rather_than_raising() -> None:
    """The watchdog outlives the loop it watches: the CPU clock of a thread that has ended
    is refused (EINVAL), and that must not kill the watchdog's thread (seen at a test's
    end). A clock id no thread has stands in for it: which ids a dead thread's clock
    takes is the C library's business."""
    from tailrace.triggerer._watchdog import _ThreadProbe

    probe = _ThreadProbe()
    assert probe.cpu() is not None  # the measurement works on a live thread
    probe._clock = 0x7FFF_FFFF
    with pytest.raises(OSError):
        time.clock_gettime(probe._clock)
    assert probe.cpu() is None
