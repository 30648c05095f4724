"""Redelivered messages are dropped at the write, and a run of them longer than the
backpressure window does not hold the stream back: a dropped event is not pending."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tailrace.testing import DagHarness

WriteDag = Callable[[str, str], Path]

# A broker that redelivers a block of messages (a dead triggerer's unacknowledged ones)
# three times the window long, after the consumer acknowledged every original.
REDELIVERING = """
from datetime import datetime
from tailrace import BaseOperator, BaseTrigger, TriggerEvent, dag


class Broker(BaseTrigger):
    def serialize(self):
        return (f"{__name__}.Broker", {})

    async def run(self):
        for i in range(20):
            yield TriggerEvent({"id": f"m{i}"}, dedup_key=f"m{i}")
        for _ in range(3):
            for i in range(10):
                yield TriggerEvent({"id": f"m{i}"}, dedup_key=f"m{i}")
        for i in range(20, 25):
            yield TriggerEvent({"id": f"m{i}"}, dedup_key=f"m{i}")


class Sink(BaseOperator):
    def execute(self, context):
        self.defer(trigger=Broker(), method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):
        return [event.payload["id"] for event in events]


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def redelivering():
    Sink(task_id="sink", max_batch_size=5, max_pending_events=10)

redelivering()
"""


def test_redeliveries_longer_than_the_backpressure_window_are_dropped_and_the_stream_goes_on(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag("redelivering.py", REDELIVERING)
    harness.parse()
    pk = harness.trigger("redelivering")
    # Before a dropped event stopped counting as pending, the trigger waited for good
    # for acknowledgements of the 30 redeliveries, which were never stored.
    assert harness.run(pk, timeout=60)["state"] == "success"
    assert harness.stream_items(pk, "sink") == [f"m{i}" for i in range(25)]
