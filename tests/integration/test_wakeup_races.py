"""Wake-ups that arrive at the wrong moment are not lost: each test forces the interleaving
by driving the scheduler's steps itself, with the safety-net poll out of the way."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from tailrace.testing import DagHarness, wait_for

WriteDag = Callable[[str, str], Path]

HANDLER_RUNNING_WHILE_THE_TRIGGER_ENDS = """
import asyncio
import time
from datetime import datetime
from pathlib import Path
from tailrace import BaseOperator, BaseTrigger, TriggerEvent, dag

HERE = Path(__file__).parent


class OneThenEnd(BaseTrigger):
    # Yields one event; returns (ending the run) once the handler of that event runs.

    def serialize(self):
        return (f"{__name__}.OneThenEnd", {})

    async def run(self):
        yield TriggerEvent({"page": 0})
        deadline = time.monotonic() + 60
        while not (HERE / "handling").exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)


class Consumer(BaseOperator):
    def execute(self, context):
        self.defer(trigger=OneThenEnd(), method_name="execute_complete")

    def execute_complete(self, context, event=None):
        (HERE / "handling").write_text("yes")
        deadline = time.monotonic() + 60
        while not (HERE / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        return event["page"]


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def ends_while_handling():
    Consumer(task_id="consume")

ends_while_handling()
"""


def _step_until(h: DagHarness, done: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "gave up waiting"
        h.scheduler.step(0.2)


def test_a_trigger_that_ends_while_its_event_is_handled_ends_the_task_without_a_poll(
    harness: DagHarness, write_dag: WriteDag, dags_folder: Path
) -> None:
    h = harness
    assert h.triggerer is not None
    write_dag("ends_while_handling.py", HANDLER_RUNNING_WHILE_THE_TRIGGER_ENDS)
    # No safety-net pass during the test: only wake-ups move the task on.
    h.scheduler.poll_interval = 3600.0
    notices = []
    noticed = threading.Condition()
    forward = h.triggerer.on_events

    def on_events(trigger_ids: set[int]) -> None:
        forward(trigger_ids)
        with noticed:
            notices.append(trigger_ids)
            noticed.notify_all()

    h.triggerer.on_events = on_events
    h.parse()
    h.start()
    pk = h.trigger("ends_while_handling")

    # 1. The first event resumes the task on a worker, which is now handling it.
    _step_until(h, (dags_folder / "handling").exists)
    # 2. Meanwhile the trigger ended: its run is complete and the scheduler was told.
    with noticed:
        assert noticed.wait_for(lambda: len(notices) >= 2, timeout=60)
    # 3. The scheduler takes that wake-up while the task is still running.
    h.scheduler.step(0)
    assert h.task_instance(pk, "consume").state == "running"
    # 4. The handler returns ("more may come"); the task goes back to deferred. Its
    #    trigger has completed with every event acknowledged, so the task must end now,
    #    not at the next safety-net pass.
    (dags_folder / "release").write_text("go")
    _step_until(h, lambda: h.task_instance(pk, "consume").state != "running")
    assert h.task_instance(pk, "consume").state == "success"
    wait_for(lambda: h.is_finished(pk) or h.scheduler.step(0) or h.is_finished(pk))
    assert h.summary(pk)["state"] == "success"


BACKLOG = """
import asyncio
import time
from datetime import datetime
from pathlib import Path
from tailrace import BaseOperator, BaseTrigger, TriggerEvent, dag

HERE = Path(__file__).parent


class Backlog(BaseTrigger):
    # Thirty events at once, then nothing more (and no end): only what is stored is left.

    def serialize(self):
        return (f"{__name__}.Backlog", {})

    async def run(self):
        for n in range(30):
            yield TriggerEvent({"n": n})
        await asyncio.Event().wait()


class Consumer(BaseOperator):
    def execute(self, context):
        self.defer(trigger=Backlog(), method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):
        # The first batch waits until all thirty are stored: no event comes after it.
        deadline = time.monotonic() + 60
        while not (HERE / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        if any(e.payload["n"] == 12 for e in events):
            raise ValueError("event 12 is poison")
        with open(HERE / "handled.txt", "a") as f:
            f.write("".join(f"{e.payload['n']}\\n" for e in events))


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def backlog():
    Consumer(task_id="consume", max_batch_size=5, retries=1, retry_delay=0,
             stream_retry="dead_letter")

backlog()
"""


def test_a_stored_backlog_is_handled_batch_after_batch_without_a_poll(
    harness: DagHarness, write_dag: WriteDag, dags_folder: Path
) -> None:
    """No event arrives while the later batches are handled, so nothing wakes the
    scheduler for them: each handled batch (and the retry after a dead-lettered one) must
    itself get the next batch going, not the next safety-net pass (a second later)."""
    from sqlalchemy import func, select

    from tailrace.db.models import TriggerEvent

    h = harness
    write_dag("backlog.py", BACKLOG)
    h.scheduler.poll_interval = 3600.0
    h.parse()
    h.start()
    h.trigger("backlog")

    def stored() -> int:
        with h.engine.connect() as conn:
            return conn.scalar(select(func.count()).select_from(TriggerEvent)) or 0

    _step_until(h, lambda: stored() == 30)
    (dags_folder / "go").write_text("go")
    handled = dags_folder / "handled.txt"

    def all_handled() -> bool:
        return handled.exists() and len(handled.read_text().split()) == 25

    _step_until(h, all_handled, timeout=60)
    assert sorted(int(n) for n in handled.read_text().split()) == [
        n for n in range(30) if n not in range(10, 15)
    ]


PAGES = """
import asyncio
from datetime import datetime
from tailrace import BaseOperator, BaseTrigger, TriggerEvent, dag


class Pages(BaseTrigger):
    # One page at a time: each is its own write, and each write tells the scheduler.

    def serialize(self):
        return (f"{__name__}.Pages", {})

    async def run(self):
        for page in range(6):
            yield TriggerEvent({"page": page})
            await asyncio.sleep(0.02)


class Fetch(BaseOperator):
    def execute(self, context):
        self.defer(trigger=Pages(), method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):
        for event in events:
            yield event.payload["page"]


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def pages():
    Fetch(task_id="fetch")

pages()
"""


def test_a_wakeup_that_fails_after_a_write_does_not_stop_the_writer(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    """The triggerer tells the scheduler of each written batch. When that fails (the
    database went away between the write and its notice), the events are stored all the
    same: the writer must go on with the next batch, not die and leave the trigger's
    events unwritten for good."""
    h = harness
    assert h.triggerer is not None
    forward = h.triggerer.on_events
    failed = []

    def on_events(trigger_ids: set[int]) -> None:
        if len(failed) < 2:
            failed.append(trigger_ids)
            raise ConnectionError("the database went away")
        forward(trigger_ids)

    h.triggerer.on_events = on_events
    write_dag("pages.py", PAGES)
    h.parse()
    pk = h.trigger("pages")
    assert h.run(pk)["state"] == "success"
    assert len(failed) == 2
    assert h.stream_items(pk, "fetch") == list(range(6))
