"""Streaming triggers: many events per run, delivered in order, once, with backpressure."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from tailrace.db.models import Trigger
from tailrace.serialization import loads
from tailrace.store import dead_letters
from tailrace.testing import DagHarness, component_env, run_cli, wait_for

WriteDag = Callable[[str, str], Path]

HEADER = """
import asyncio
from datetime import datetime
from pathlib import Path
from tailrace import BaseOperator, BaseTrigger, StartTriggerArgs, TriggerEvent, dag

START = datetime(2026, 1, 1)
HERE = Path(__file__).parent


class Pages(BaseTrigger):
    # Yields `count` pages; records how many it has produced in pages_fetched.txt.

    def __init__(self, count, fail_at=None):
        super().__init__()
        self.count = count

    def serialize(self):
        return (f"{__name__}.Pages", {"count": self.count})

    async def run(self):
        for page in range(self.count):
            (HERE / "pages_fetched.txt").write_text(str(page + 1))
            yield TriggerEvent({"page": page})
            await asyncio.sleep(0)


def record(name, value):
    with open(HERE / name, "a") as f:
        f.write(f"{value}\\n")
"""


def test_a_batch_consumer_gets_every_event_in_order_in_few_worker_executions(
    harness: DagHarness, write_dag: WriteDag, dags_folder: Path
) -> None:
    write_dag(
        "batches.py",
        HEADER
        + """
class Doubler(BaseOperator):
    def execute(self, context):
        self.defer(trigger=Pages(250), method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):
        record("batches.txt", f"{events[0].sequence_index}-{events[-1].sequence_index}")
        for event in events:
            yield event.payload["page"] * 2

@dag(schedule=None, start_date=START)
def batches():
    Doubler(task_id="double", max_batch_size=100, max_pending_events=1000)

batches()
""",
    )
    harness.parse()
    pk = harness.trigger("batches")
    assert harness.run(pk)["state"] == "success"
    row = harness.task_instance(pk, "double")
    assert harness.stream_items(pk, row.task_id) == [page * 2 for page in range(250)]
    batches = (dags_folder / "batches.txt").read_text().split()
    spans = [tuple(map(int, b.split("-"))) for b in batches]
    # Contiguous, ordered, nothing twice, never more than max_batch_size at once.
    assert spans[0][0] == 0 and spans[-1][1] == 249
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start == end + 1
    assert all(b - a + 1 <= 100 for a, b in spans)
    assert row.try_number == 1
    # One execute plus ceil(250 / 100) batches at the least; far fewer than 250 resumes.
    assert len(spans) >= 3 and harness.dispatched.count(row.id) == 1 + len(spans)


def test_a_classic_resume_method_is_called_once_per_event_in_order(
    harness: DagHarness, write_dag: WriteDag, dags_folder: Path
) -> None:
    write_dag(
        "classic.py",
        HEADER
        + """
class OneByOne(BaseOperator):
    def execute(self, context):
        self.defer(trigger=Pages(5), method_name="execute_complete")

    def execute_complete(self, context, event=None):
        record("classic.txt", event["page"])
        return event["page"]

@dag(schedule=None, start_date=START)
def classic():
    OneByOne(task_id="one_by_one")

classic()
""",
    )
    harness.parse()
    pk = harness.trigger("classic")
    assert harness.run(pk)["state"] == "success"
    assert (dags_folder / "classic.txt").read_text().split() == ["0", "1", "2", "3", "4"]
    # The last event's result is the task's return value.
    assert harness.xcom(pk, "one_by_one") == 4


def test_with_neither_method_payloads_stream_straight_out_with_no_worker(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag(
        "direct.py",
        HEADER
        + """
class Straight(BaseOperator):
    start_from_trigger = True
    start_trigger_args = StartTriggerArgs(
        trigger_cls=f"{__name__}.Pages", trigger_kwargs={"count": 1000}
    )

    def execute(self, context):
        raise AssertionError("never runs on a worker")

@dag(schedule=None, start_date=START)
def direct():
    Straight(task_id="straight", max_pending_events=100_000)

direct()
""",
    )
    harness.parse()
    pk = harness.trigger("direct")
    assert harness.run(pk)["state"] == "success"
    row = harness.task_instance(pk, "straight")
    assert row.id not in harness.dispatched
    assert harness.stream_items(pk, row.task_id) == [{"page": page} for page in range(1000)]


@pytest.fixture
def running(harness: DagHarness) -> Iterator[DagHarness]:
    with harness.running():
        yield harness


def test_backpressure_pauses_the_producer_until_the_consumer_catches_up(
    running: DagHarness, write_dag: WriteDag, dags_folder: Path
) -> None:
    h = running
    write_dag(
        "slow.py",
        HEADER
        + """
import time

class Slow(BaseOperator):
    def execute(self, context):
        self.defer(trigger=Pages(100), method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):
        deadline = time.monotonic() + 60
        while not (HERE / "gate").exists():  # the test opens the gate
            if time.monotonic() > deadline:
                raise TimeoutError("the gate never opened")
            time.sleep(0.01)
        return [e.payload["page"] for e in events]

@dag(schedule=None, start_date=START)
def slow():
    Slow(task_id="slow", max_batch_size=5, max_pending_events=10)

slow()
""",
    )
    h.parse()
    pk = h.trigger("slow")
    assert h.triggerer is not None
    triggerer = h.triggerer

    def paused() -> bool:
        return any(r.paused for r in triggerer.running.values())

    wait_for(paused)
    (paused_run,) = list(triggerer.running.values())
    fetched = int((dags_folder / "pages_fetched.txt").read_text())
    # Exactly max_pending events ahead of the acknowledged ones, and no further.
    assert paused_run.next_sequence - 1 - paused_run.acked == 10
    assert fetched == paused_run.next_sequence
    (dags_folder / "gate").write_text("open")
    wait_for(lambda: h.is_finished(pk))
    assert h.summary(pk)["state"] == "success"
    assert h.stream_items(pk, "slow") == list(range(100))


def test_failure_at_event_k_stops_the_stream_there(
    harness: DagHarness, write_dag: WriteDag, dags_folder: Path
) -> None:
    write_dag(
        "fails.py",
        HEADER
        + """
class Picky(BaseOperator):
    def execute(self, context):
        self.defer(trigger=Pages(20), method_name="execute_complete")

    def execute_complete(self, context, event=None):
        if event["page"] == 7:
            raise ValueError("page 7 is malformed")
        record("handled.txt", event["page"])

@dag(schedule=None, start_date=START)
def fails():
    Picky(task_id="picky", max_pending_events=3)

fails()
""",
    )
    harness.parse()
    pk = harness.trigger("fails")
    assert harness.run(pk)["state"] == "failed"
    row = harness.task_instance(pk, "picky")
    assert "page 7 is malformed" in (row.error or "")
    assert (dags_folder / "handled.txt").read_text().split() == [str(p) for p in range(7)]
    with harness.engine.connect() as conn:
        assert conn.scalar(select(Trigger.completed)) is True


RETRYING = """
class FailsOnce(BaseOperator):
    def execute(self, context):
        record("starts.txt", context["ti"].try_number)
        self.defer(trigger=Pages(20), method_name="execute_complete")

    def execute_complete(self, context, event=None):
        if event["page"] == 7 and not (HERE / "failed_once").exists():
            (HERE / "failed_once").write_text("yes")
            raise ValueError("page 7 hit a transient error")
        record("handled.txt", event["page"])
        return event["page"]

@dag(schedule=None, start_date=START)
def retrying():
    FailsOnce(task_id="consume", retries=1, retry_delay=0, max_pending_events=4,
              stream_retry="{mode}")

retrying()
"""


@pytest.mark.parametrize("mode", ["resume", "restart"])
def test_a_retry_resumes_after_the_last_ack_or_restarts_the_run_as_the_operator_chooses(
    harness: DagHarness, write_dag: WriteDag, dags_folder: Path, mode: str
) -> None:
    write_dag("retrying.py", HEADER + RETRYING.replace("{mode}", mode))
    harness.parse()
    pk = harness.trigger("retrying")
    assert harness.run(pk)["state"] == "success"
    row = harness.task_instance(pk, "consume")
    assert row.try_number == 2
    handled = [int(p) for p in (dags_folder / "handled.txt").read_text().split()]
    starts = (dags_folder / "starts.txt").read_text().split()
    if mode == "resume":
        # One trigger run; the second try picks up at page 7: every page handled once.
        assert handled == list(range(20))
        assert starts == ["1"]
    else:
        # The second try runs execute again, on a fresh trigger run from page 0.
        assert handled == list(range(7)) + list(range(20))
        assert starts == ["1", "2"]


POISONED = """
class Poisoned(BaseOperator):
    # Page 7 can never be handled; every other page goes to the sink once.
    def execute(self, context):
        self.defer(trigger=Pages(20), method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):
        record("tries.txt", f"{context['ti'].try_number}:{events[0].sequence_index}")
        if any(e.payload["page"] == 7 for e in events):
            raise ValueError("page 7 is malformed")
        for event in events:
            record("handled.txt", event.payload["page"])
            yield event.payload["page"]

def on_retry(context):
    record("callbacks.txt", "retry")

def on_failure(context):
    record("callbacks.txt", "failure")

@dag(schedule=None, start_date=START)
def poisoned():
    Poisoned(task_id="consume", retries=2, retry_delay=0, max_batch_size=4,
             max_pending_events=8, stream_retry="{mode}",
             on_retry_callback=on_retry, on_failure_callback=on_failure)

poisoned()
"""


def test_a_batch_that_fails_every_try_goes_to_the_dead_letters_and_the_stream_goes_on(
    harness: DagHarness, write_dag: WriteDag, dags_folder: Path, database_url: str, tmp_path: Path
) -> None:
    write_dag("poisoned.py", HEADER + POISONED.replace("{mode}", "dead_letter"))
    harness.parse()
    pk = harness.trigger("poisoned")
    assert harness.run(pk)["state"] == "success"
    handled = [int(p) for p in (dags_folder / "handled.txt").read_text().split()]
    with harness.engine.connect() as conn:
        letters = dead_letters.list_letters(conn)
        trigger = conn.execute(select(Trigger.acked_sequence, Trigger.next_sequence)).one()
    # The batch holding page 7 (pages 4-7 or later, as the batches fell) failed three
    # tries, then went to the dead letters with the error; everything else was handled.
    dead = sorted(loads(letter.payload)["page"] for letter in letters)
    assert 7 in dead and len(dead) <= 4
    assert sorted(handled + dead) == list(range(20))
    assert all("ValueError: page 7 is malformed" in letter.reason for letter in letters)
    assert {(letter.dag_id, letter.task_id, letter.try_number) for letter in letters} == {
        ("poisoned", "consume", 3)
    }
    assert trigger.acked_sequence == trigger.next_sequence - 1 == 19
    # Three tries on the poisoned batch, the next batch on a fresh try with retries back;
    # each failed try was a retry to its callbacks (the task went on), never a failure.
    tries = (dags_folder / "tries.txt").read_text().split()
    poisoned_at = min(letter.sequence_index for letter in letters)
    assert [t for t in tries if t.endswith(f":{poisoned_at}")] == [
        f"{n}:{poisoned_at}" for n in (1, 2, 3)
    ]
    assert (dags_folder / "callbacks.txt").read_text().split() == ["retry"] * 3
    row = harness.task_instance(pk, "consume")
    assert row.state == "success" and row.try_number == 4
    assert harness.stream_items(pk, "consume") == handled
    # Listed by the CLI, as JSON and as a table that reads at 80 columns.
    env = {**component_env(database_url, dags_folder), "TAILRACE_HOME": str(tmp_path / "home")}
    listed = run_cli({**env, "COLUMNS": "80"}, "streams", "dead-letters", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [(d["sequence_index"], loads(d["payload"])) for d in json.loads(listed.stdout)] == [
        (letter.sequence_index, loads(letter.payload)) for letter in letters
    ]
    table = run_cli({**env, "COLUMNS": "80"}, "streams", "dead-letters").stdout
    assert f"#{poisoned_at}-#{poisoned_at + len(letters) - 1}" in table
    assert "ValueError: page 7" in table and "is malformed" in table
    assert max(len(line) for line in table.splitlines()) <= 80


def test_without_dead_letters_a_batch_that_fails_every_try_fails_the_task(
    harness: DagHarness, write_dag: WriteDag, dags_folder: Path
) -> None:
    write_dag("poisoned.py", HEADER + POISONED.replace("{mode}", "resume"))
    harness.parse()
    pk = harness.trigger("poisoned")
    assert harness.run(pk)["state"] == "failed"
    with harness.engine.connect() as conn:
        assert dead_letters.list_letters(conn) == []
    assert (dags_folder / "callbacks.txt").read_text().split() == ["retry", "retry", "failure"]
    assert 7 not in [int(p) for p in (dags_folder / "handled.txt").read_text().split()]


def test_a_downstream_task_reads_a_stream_lazily_page_by_page(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag(
        "reader.py",
        HEADER
        + """
from tailrace import task

class Produce(BaseOperator):
    def execute(self, context):
        self.defer(trigger=Pages(2500), method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):
        return [e.payload["page"] for e in events]

@dag(schedule=None, start_date=START)
def reader():
    produce = Produce(task_id="produce", max_batch_size=500, max_pending_events=5000)

    @task
    def consume(pages):
        # Iterated a page (1,000 items) at a time; never a list of 2,500 in the worker.
        total = 0
        for page in pages:
            total += page
        return {"kind": type(pages).__name__, "len": len(pages), "sum": total,
                "third": pages[2], "last": pages[-1]}

    consume(produce.output)

reader()
""",
    )
    harness.parse()
    pk = harness.trigger("reader")
    assert harness.run(pk)["state"] == "success"
    assert harness.xcom(pk, "consume") == {
        "kind": "StreamReader",
        "len": 2500,
        "sum": sum(range(2500)),
        "third": 2,
        "last": 2499,
    }
