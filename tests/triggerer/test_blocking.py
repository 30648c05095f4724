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

# What every DAG here starts with: an operator whose task starts in the triggerer.
HEADER = """
import asyncio
import time
from datetime import datetime
from pathlib import Path
from tailrace import BaseOperator, BaseTrigger, StartTriggerArgs, TriggerEvent, dag

HERE = Path(__file__).parent


class FromTrigger(BaseOperator):
    start_from_trigger = True

    def __init__(self, trigger, trigger_kwargs=None, **kwargs):
        super().__init__(**kwargs)
        self.start_trigger_args = StartTriggerArgs(
            trigger_cls=f"{__name__}.{trigger}", trigger_kwargs=trigger_kwargs or {}
        )

    def execute(self, context):
        raise AssertionError("never runs on a worker")
"""

DAG = (
    HEADER
    + """

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


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def blocking():
    FromTrigger(trigger="Ticks", task_id="ticks", max_pending_events=100_000)
    FromTrigger(trigger="Blocker", task_id="blocker")

blocking()
"""
)


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
    (warning,) = [line for line in text.splitlines() if "has blocked the" in line]
    assert "thread of its own" in warning
    (moved,) = [line for line in text.splitlines() if "starts again on a thread" in line]
    assert "on a thread of its own, from its start" in moved
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


LOOP_BOUND_DAG = (
    HEADER
    + """

class Paged(BaseTrigger):
    # Like a client library's: what its first step opens (a queue, whose waits belong to
    # the loop it first waited on) serves its later steps. That first step blocks the
    # loop long enough for the trigger to be moved off it.
    def __init__(self, checkpoints):
        super().__init__()
        self.checkpoints = checkpoints

    def serialize(self):
        return (f"{__name__}.Paged", {"checkpoints": self.checkpoints})

    async def run(self):
        replies = asyncio.Queue()
        start = self.checkpoint["next"] if self.checkpoint else 0
        for page in range(start, 3):
            asyncio.get_running_loop().call_soon(replies.put_nowait, page)
            got = await replies.get()
            if page == 0:
                self.log.info("fetched the first page, slowly")
                time.sleep(1.5)
            mark = {"next": page + 1} if self.checkpoints else None
            yield TriggerEvent({"page": got}, checkpoint=mark)


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def loop_bound():
    FromTrigger(
        trigger="Paged", trigger_kwargs={"checkpoints": CHECKPOINTS}, task_id="paged"
    )

loop_bound()
"""
)


@pytest.mark.parametrize(
    ("checkpoints", "starts_from", "first_pages"),
    [(True, "its last checkpoint (event 0)", 1), (False, "its start", 2)],
)
def test_a_trigger_moved_off_the_loop_starts_again_there_and_its_stream_stays_whole(
    harness: DagHarness,
    write_dag: WriteDag,
    checkpoints: bool,
    starts_from: str,
    first_pages: int,
) -> None:
    """What a trigger opened on the shared loop cannot serve it on another (its futures
    belong to the first): moved, it starts again on its own loop from its last checkpoint
    (else from its start), and the events it yields again are stored once."""
    write_dag("loop_bound.py", LOOP_BOUND_DAG.replace("CHECKPOINTS", str(checkpoints)))
    harness.parse()
    pk = harness.trigger("loop_bound")
    harness.run(pk, timeout=90)
    text = harness.log(pk, "paged")
    assert harness.summary(pk)["state"] == "success", text
    assert harness.stream_items(pk, "paged") == [{"page": 0}, {"page": 1}, {"page": 2}]
    (moved,) = [line for line in text.splitlines() if "starts again on a thread" in line]
    assert f"on a thread of its own, from {starts_from}" in moved
    # From its checkpoint it skips what it had done; from its start it does it again.
    assert text.count("fetched the first page") == first_pages, text


FAILS_AGAIN_DAG = (
    HEADER
    + """

class Job(BaseTrigger):
    # Reports a remote job's progress; the second time it looks, the job has failed.
    def serialize(self):
        return (f"{__name__}.Job", {})

    async def run(self):
        if (HERE / "looked").exists():
            raise RuntimeError("the remote job failed")
        (HERE / "looked").touch()
        yield TriggerEvent({"progress": 0})
        time.sleep(1.5)
        yield TriggerEvent({"progress": 50})
        yield TriggerEvent({"progress": 100})


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def fails_again():
    FromTrigger(trigger="Job", task_id="job")

fails_again()
"""
)


def test_a_trigger_started_again_that_fails_at_once_fails_its_task(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    """Started again, a trigger may yield fewer events than it had: its last event (here
    its failure) takes an index past those stored, not one of theirs (dropped, it would
    leave the task to succeed on the events it had)."""
    write_dag("fails_again.py", FAILS_AGAIN_DAG)
    harness.parse()
    pk = harness.trigger("fails_again")
    harness.run(pk, timeout=90)
    text = harness.log(pk, "job")
    assert "starts again on a thread of its own" in text
    assert harness.summary(pk)["state"] == "failed", text
    assert "the remote job failed" in text
    assert harness.stream_items(pk, "job") == [{"progress": 0}, {"progress": 50}]


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


@pytest.mark.parametrize("moved", [False, True], ids=["on_the_shared_loop", "moved"])
def test_a_stall_is_blamed_on_the_trigger_whose_task_holds_the_loop_unless_it_was_moved(
    moved: bool,
) -> None:
    """A moved trigger's code runs on its own loop; on the shared loop its task only does
    the runner's bookkeeping, so a stall while that task is current (a loaded machine, seen
    in CI) is not its doing and must not count against it a second time."""
    import asyncio
    from types import SimpleNamespace

    from tailrace.triggerer._own_loop import OwnLoop
    from tailrace.triggerer._runner import Running
    from tailrace.triggerer._watchdog import LoopWatchdog

    runner = SimpleNamespace(running={})
    watchdog = LoopWatchdog(runner, threshold=0.1)  # type: ignore[arg-type]
    running = Running(7, 1, "run-7", 0, "dags.Slow", "slow.wait", log_path=None)
    if moved:
        running.own_loop = OwnLoop("trigger-7")

    async def main() -> None:
        watchdog.start(asyncio.get_running_loop())

        async def step() -> None:
            time.sleep(0.8)  # the stall under test: eight thresholds of a blocking call

        running.task = asyncio.create_task(step())
        runner.running[running.trigger_id] = running
        watchdog.trigger_started()
        await running.task
        await asyncio.to_thread(wait_for, long_stalls, 10)
        watchdog.stop()

    def long_stalls() -> list[str]:
        # A loaded machine may add short stalls of its own; the step's is the long one.
        stalls = (re.search(r"for (\d+\.\d+)s", w) for w in watchdog.warnings)
        return [
            w for w, s in zip(watchdog.warnings, stalls, strict=True) if s and float(s[1]) > 0.6
        ]

    try:
        asyncio.run(main())
    finally:
        if running.own_loop is not None:
            running.own_loop.stop()
    [warning] = long_stalls()
    if moved:
        assert warning.startswith("code that is not a trigger we run has blocked"), warning
        assert (running.blocks, running.move_off_loop) == (0, False)
    else:
        assert warning.startswith("trigger 7 (dags.Slow) for slow.wait has blocked"), warning
        assert (running.blocks, running.move_off_loop) == (1, True)
