"""Live pruning (ADR 0023): consumed events are deleted while the stream goes on."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import func, select

from tailrace.db.models import Trigger, TriggerEvent
from tailrace.testing import DagHarness, wait_for

WriteDag = Callable[[str, str], Path]

EVENTS = 6000
PENDING = 100

LONG_STREAM = f"""
import asyncio
from datetime import datetime
from tailrace import BaseOperator, BaseTrigger, TriggerEvent, dag


class Counter(BaseTrigger):
    def __init__(self, n):
        super().__init__()
        self.n = n

    def serialize(self):
        return (f"{{__name__}}.Counter", {{"n": self.n}})

    async def run(self):
        for i in range(self.n):
            yield TriggerEvent({{"i": i}})
            if i % 100 == 0:
                await asyncio.sleep(0)


class Sum(BaseOperator):
    def execute(self, context):
        self.defer(trigger=Counter({EVENTS}), method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):
        return [event.payload["i"] for event in events]


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def long_stream():
    Sum(task_id="sum", max_batch_size=500, max_pending_events={PENDING})

long_stream()
"""


def _run_counting_events(harness: DagHarness, dag_id: str) -> tuple[int, list[int]]:
    """Run ``dag_id`` to success while counting the stored trigger events every 50 ms
    (a sampling interval, not a wait: the run's end is what is waited for)."""
    stored: list[int] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            with harness.engine.connect() as conn:
                stored.append(conn.scalar(select(func.count()).select_from(TriggerEvent)) or 0)
            done.wait(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        pk = harness.trigger(dag_id)
        assert harness.run(pk, timeout=110)["state"] == "success"
    finally:
        done.set()
        sampler.join()
    return pk, stored


def test_a_long_streams_events_are_pruned_while_it_runs_and_its_output_is_whole(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag("long_stream.py", LONG_STREAM)
    harness.parse()
    pk, stored = _run_counting_events(harness, "long_stream")
    assert harness.stream_items(pk, "sum") == list(range(EVENTS)), "every event once, in order"
    # Without pruning the table would reach EVENTS rows; with it, it holds at most the
    # backpressure window plus what was acknowledged since the last prune.
    assert max(stored) < EVENTS // 3, max(stored)

    def pruned() -> bool:
        with harness.engine.connect() as conn:
            trigger = conn.execute(select(Trigger)).one()
            left = conn.scalar(select(func.count()).select_from(TriggerEvent))
        return trigger.pruned_sequence == EVENTS - 1 and left == 0

    with harness.running():
        wait_for(pruned, timeout=30)


MESSAGES = 4000
REDELIVERED = 10

QUEUE_STREAM = f"""
import asyncio
from datetime import datetime
from sqlalchemy import create_engine, select
from tailrace import BaseOperator, BaseTrigger, TriggerEvent, dag
from tailrace.db.models import TriggerEvent as Row

DATABASE = {{database!r}}


def stored(key):
    engine = create_engine(DATABASE)
    try:
        with engine.connect() as conn:
            return conn.scalar(select(Row.id).where(Row.dedup_key == key)) is not None
    finally:
        engine.dispose()


class Queue(BaseTrigger):
    # A broker's queue: each message carries its id; at the end the broker redelivers
    # the first ones (their acknowledgement lost), after their events were pruned.
    def serialize(self):
        return (f"{{{{__name__}}}}.Queue", {{{{}}}})

    async def run(self):
        for i in range({MESSAGES}):
            yield TriggerEvent({{{{"id": f"m{{{{i}}}}"}}}}, dedup_key=f"m{{{{i}}}}")
            if i % 100 == 0:
                await asyncio.sleep(0)
        for i in range({REDELIVERED}):
            while await asyncio.to_thread(stored, f"m{{{{i}}}}"):
                await asyncio.sleep(0.05)
            yield TriggerEvent({{{{"id": f"m{{{{i}}}}"}}}}, dedup_key=f"m{{{{i}}}}")


class Sink(BaseOperator):
    def execute(self, context):
        self.defer(trigger=Queue(), method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):
        return [event.payload["id"] for event in events]


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def queue_stream():
    Sink(task_id="sink", max_batch_size=500, max_pending_events={PENDING})

queue_stream()
"""


def test_a_queue_streams_events_are_pruned_and_a_redelivery_after_that_is_still_dropped(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    database = harness.engine.url.render_as_string(hide_password=False)
    write_dag("queue_stream.py", QUEUE_STREAM.format(database=database))
    harness.parse()
    pk, stored = _run_counting_events(harness, "queue_stream")
    # The redelivered messages were recognised by their dedup records and dropped,
    # though their events had gone (the trigger waited for that before redelivering).
    assert harness.stream_items(pk, "sink") == [f"m{i}" for i in range(MESSAGES)]
    # Queue events are pruned like any other: the table holds about the window.
    assert max(stored) < MESSAGES // 3, max(stored)
