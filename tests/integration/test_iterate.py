"""``.iterate()``: mapped instances created as a stream's items arrive, run by real workers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from tailrace.dagrun import run_summary
from tailrace.streams import stream_summaries
from tailrace.testing import DagHarness, wait_for

WriteDag = Callable[[str, str], Path]

HEADER = """
import asyncio
import time
from pathlib import Path
from tailrace import BaseOperator, BaseTrigger, StartTriggerArgs, TriggerEvent, dag, task

START = None
HERE = Path(__file__).parent


class Items(BaseTrigger):
    # Streams `count` items {"n": i}. With `hold_after`, it waits after that many items
    # until the file `release` exists (the test or a downstream task creates it).

    def __init__(self, count, hold_after=None, release=None):
        super().__init__()
        self.count, self.hold_after, self.release = count, hold_after, release

    def serialize(self):
        return (f"{__name__}.Items", {
            "count": self.count, "hold_after": self.hold_after, "release": self.release,
        })

    async def run(self):
        for i in range(self.count):
            if i == self.hold_after:
                while not (HERE / self.release).exists():
                    await asyncio.sleep(0.01)
            (HERE / "produced.txt").write_text(str(i + 1))
            yield TriggerEvent({"n": i})
        record("producer_done.txt", time.time())


def stream_of(count, hold_after=None, release=None, **kwargs):
    # A task whose output stream is the trigger's events: it never takes a worker.
    class Stream(BaseOperator):
        start_from_trigger = True
        start_trigger_args = StartTriggerArgs(
            trigger_cls=f"{__name__}.Items",
            trigger_kwargs={"count": count, "hold_after": hold_after, "release": release},
        )

        def execute(self, context):
            raise AssertionError("starts in the triggerer, never on a worker")

    return Stream(**kwargs)


def record(name, value):
    with open(HERE / name, "a") as f:
        f.write(f"{value}\\n")


def wait_for_gate(name):
    # The task's side of a gate: the file appears when the test (or another task) opens
    # it. Polling a file is the one signal that crosses into a worker process.
    deadline = time.monotonic() + 60
    while not (HERE / name).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the gate {name!r} never opened")
        time.sleep(0.01)
"""


def wait_until_held(harness: DagHarness, pk: int, *, items: int) -> dict[str, Any]:
    """The run's stream once at least ``items`` wait in it and its trigger is paused."""

    def held() -> dict[str, Any] | None:
        with harness.engine.connect() as conn:  # a fresh connection: never hold a lock
            summaries = stream_summaries(conn, dag_run_id=pk)
        found = [s for s in summaries if s["paused_by_backpressure"] and s["items"] >= items]
        return found[0] if found else None

    return wait_for(held)


def lines(folder: Path, name: str) -> list[str]:
    path = folder / name
    return path.read_text().split() if path.exists() else []


def test_items_are_processed_while_the_producer_is_still_streaming(
    harness: DagHarness, write_dag: WriteDag, dags_folder: Path
) -> None:
    # The producer holds after item 0 until item 0 has been processed downstream: an
    # expansion that waited for the whole stream would never finish.
    write_dag(
        "lazy.py",
        HEADER
        + """
@task
def square(item):
    record("processed.txt", f"{item['n']}:{time.time()}")
    (HERE / "first_done").touch()
    return item["n"] ** 2

@dag(schedule=None)
def lazy():
    square.iterate(item=stream_of(5, hold_after=1, release="first_done", task_id="produce").output)

lazy()
""",
    )
    harness.parse()
    pk = harness.trigger("lazy")
    assert harness.run(pk)["state"] == "success"
    processed = dict(line.split(":") for line in lines(dags_folder, "processed.txt"))
    assert sorted(processed) == ["0", "1", "2", "3", "4"]
    (producer_done,) = map(float, lines(dags_folder, "producer_done.txt"))
    assert float(processed["0"]) < producer_done
    states = harness.states(pk)
    assert states == {"produce": "success"} | {f"square[{i}]": "success" for i in range(5)}


def test_an_empty_stream_skips_the_iterate_task_and_its_downstream_runs_per_rule(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag(
        "empty.py",
        HEADER
        + """
@task
def handle(item):
    raise AssertionError("no item, no instance")

@task(trigger_rule="all_done")
def report():
    return "reported"

@dag(schedule=None)
def empty():
    handle.iterate(item=stream_of(0, task_id="produce").output) >> report()

empty()
""",
    )
    harness.parse()
    pk = harness.trigger("empty")
    assert harness.run(pk)["state"] == "success"
    assert harness.states(pk) == {"produce": "success", "handle": "skipped", "report": "success"}


def test_filtered_out_items_become_skipped_instances_and_keep_their_index(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag(
        "filtered.py",
        HEADER
        + """
@task
def handle(item):
    return item["n"] * 10

@dag(schedule=None)
def filtered():
    items = stream_of(6, task_id="produce").output
    handle.iterate(item=items.filter(lambda item: item["n"] % 3 == 0))

filtered()
""",
    )
    harness.parse()
    pk = harness.trigger("filtered")
    assert harness.run(pk)["state"] == "success"
    states = harness.states(pk)
    assert [states[f"handle[{i}]"] for i in range(6)] == [
        "success",
        "skipped",
        "skipped",
        "success",
        "skipped",
        "skipped",
    ]
    assert harness.xcom(pk, "handle") in (0, 30)  # one of the mapped values
    assert "was filtered out" in harness.log(pk, "handle", map_index=1)


def test_zip_stops_at_the_shorter_stream_and_concat_batched_count_across_inputs(
    harness: DagHarness, write_dag: WriteDag, dags_folder: Path
) -> None:
    write_dag(
        "combined.py",
        HEADER
        + """
@task
def pair(item):
    record("pairs.txt", f"{item[0]['n']}-{item[1]['n']}")

@task
def batch(items):
    record("batches.txt", ",".join(str(i if isinstance(i, int) else i["n"]) for i in items))

@dag(schedule=None)
def combined():
    short = stream_of(3, task_id="short").output
    long = stream_of(7, task_id="long").output
    pair.iterate(item=long.zip(short))
    batch.iterate(items=short.concat([100, 101]).batched(2))

combined()
""",
    )
    harness.parse()
    pk = harness.trigger("combined")
    assert harness.run(pk)["state"] == "success"
    assert sorted(lines(dags_folder, "pairs.txt")) == ["0-0", "1-1", "2-2"]
    # 3 stream items then 2 literals, in twos: [0, 1], [2, 100], [101].
    assert sorted(lines(dags_folder, "batches.txt")) == ["0,1", "101", "2,100"]
    states = harness.states(pk)
    assert sum(1 for name in states if name.startswith("pair[")) == 3
    assert sum(1 for name in states if name.startswith("batch[")) == 3


def test_a_two_level_chain_runs_the_last_level_before_the_producer_finishes(
    harness: DagHarness, write_dag: WriteDag, dags_folder: Path
) -> None:
    # The producer holds after item 0 until C has handled item 0 (A -> B -> C).
    write_dag(
        "chain.py",
        HEADER
        + """
@task
def double(item):
    return item["n"] * 2

@task
def store(value):
    record("stored.txt", f"{value}:{time.time()}")
    (HERE / "stored_first").touch()

@dag(schedule=None)
def chain():
    produced = stream_of(4, hold_after=1, release="stored_first", task_id="produce").output
    store.iterate(value=double.iterate(item=produced))

chain()
""",
    )
    harness.parse()
    pk = harness.trigger("chain")
    assert harness.run(pk)["state"] == "success"
    stored = dict(line.split(":") for line in lines(dags_folder, "stored.txt"))
    assert sorted(stored, key=int) == ["0", "2", "4", "6"]
    (producer_done,) = map(float, lines(dags_folder, "producer_done.txt"))
    assert float(stored["0"]) < producer_done


def test_a_failing_instance_retries_alone_and_its_downstream_item_waits_for_it(
    harness: DagHarness, write_dag: WriteDag, dags_folder: Path
) -> None:
    write_dag(
        "retrying.py",
        HEADER
        + """
@task(retries=1, retry_delay=0)
def flaky(item):
    record("attempts.txt", item["n"])
    if item["n"] == 2 and not (HERE / "failed_once").exists():
        (HERE / "failed_once").touch()
        raise RuntimeError("first try of item 2 fails")
    return item["n"]

@task
def after(value):
    record("after.txt", value)

@dag(schedule=None)
def retrying():
    after.iterate(value=flaky.iterate(item=stream_of(4, task_id="produce").output))

retrying()
""",
    )
    harness.parse()
    pk = harness.trigger("retrying")
    assert harness.run(pk)["state"] == "success"
    assert sorted(lines(dags_folder, "attempts.txt")) == ["0", "1", "2", "2", "3"]
    assert sorted(lines(dags_folder, "after.txt")) == ["0", "1", "2", "3"]
    assert harness.task_instance(pk, "flaky", map_index=2).try_number == 2
    assert harness.task_instance(pk, "flaky", map_index=3).try_number == 1


def test_a_failed_item_fails_its_downstream_item_and_the_run(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag(
        "failing.py",
        HEADER
        + """
@task
def check(item):
    if item["n"] == 1:
        raise ValueError("item 1 is bad")
    return item["n"]

@task
def after(value):
    return value

@dag(schedule=None)
def failing():
    after.iterate(value=check.iterate(item=stream_of(3, task_id="produce").output))

failing()
""",
    )
    harness.parse()
    pk = harness.trigger("failing")
    assert harness.run(pk)["state"] == "failed"
    states = harness.states(pk)
    assert [states[f"check[{i}]"] for i in range(3)] == ["success", "failed", "success"]
    assert [states[f"after[{i}]"] for i in range(3)] == ["success", "upstream_failed", "success"]


def test_iterate_over_a_list_behaves_like_expand(harness: DagHarness, write_dag: WriteDag) -> None:
    write_dag(
        "lists.py",
        HEADER
        + """
@task
def numbers():
    return [3, 1, 4, 1, 5]

@task(map_index_template="n={{ task.op_kwargs['n'] }}")
def eager(n):
    return n * n

@task(map_index_template="n={{ task.op_kwargs['n'] }}")
def lazy(n):
    return n * n

@task
def total(values):
    return sum(values)

@dag(schedule=None)
def lists():
    ns = numbers()
    total.override(task_id="eager_total")(eager.expand(n=ns))
    total.override(task_id="lazy_total")(lazy.iterate(n=ns))
    lazy.override(task_id="literal").iterate(n=[7, 8])

lists()
""",
    )
    harness.parse()
    pk = harness.trigger("lists")
    assert harness.run(pk)["state"] == "success"
    assert harness.xcom(pk, "eager_total") == harness.xcom(pk, "lazy_total") == 52
    lazy = [harness.task_instance(pk, "lazy", i).rendered_map_index for i in range(5)]
    eager = [harness.task_instance(pk, "eager", i).rendered_map_index for i in range(5)]
    assert lazy == eager == ["n=3", "n=1", "n=4", "n=1", "n=5"]
    states = harness.states(pk)
    assert [states[f"literal[{i}]"] for i in range(2)] == ["success", "success"]


def test_slow_consumers_hold_the_producer_through_backpressure(
    harness: DagHarness, write_dag: WriteDag, dags_folder: Path
) -> None:
    write_dag(
        "held.py",
        HEADER
        + """
@task
def slow(item):
    wait_for_gate("gate")
    record("handled.txt", item["n"])

@dag(schedule=None)
def held():
    slow.iterate(item=stream_of(40, task_id="produce", max_pending_events=5).output)

held()
""",
    )
    harness.parse()
    pk = harness.trigger("held")

    with harness.running():
        summary = wait_until_held(harness, pk, items=5)
        assert summary["items"] == 5
        # Five items wait in the stream for their (blocked) instances, five more in the
        # trigger's buffer; the producer has stopped short of its 40 items.
        assert summary["pending"] == 5
        produced = int((dags_folder / "produced.txt").read_text())
        assert produced <= 11
        assert sum(1 for name in harness.states(pk) if name.startswith("slow[")) == 5
        (dags_folder / "gate").touch()
        wait_for(lambda: harness.is_finished(pk), timeout=60)
    assert harness.summary(pk)["state"] == "success"
    assert sorted(map(int, lines(dags_folder, "handled.txt"))) == list(range(40))


def test_max_active_tis_per_dagrun_bounds_running_instances(
    engine: Engine, write_dag: WriteDag, dags_folder: Path, tmp_path: Path
) -> None:
    write_dag(
        "bounded.py",
        HEADER
        + """
@task(max_active_tis_per_dagrun=2)
def work(item):
    start = time.time()
    time.sleep(0.05)
    record("spans.txt", f"{start}-{time.time()}")

@dag(schedule=None)
def bounded():
    work.iterate(item=stream_of(8, task_id="produce").output)

bounded()
""",
    )
    with DagHarness(engine, dags_folder, log_folder=tmp_path / "logs", processes=4) as harness:
        harness.parse()
        assert harness.trigger_and_run("bounded")["state"] == "success"
    spans = [tuple(map(float, s.split("-"))) for s in lines(dags_folder, "spans.txt")]
    assert len(spans) == 8
    # At no instant did more than two instances run at once.
    most = max(sum(1 for s, e in spans if s <= start < e) for start, _ in spans)
    assert most <= 2


def test_expand_over_a_finished_stream_and_a_whole_stream_read_lazily(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag(
        "whole.py",
        HEADER
        + """
@task
def handle(item):
    return item["n"]

@task
def total(items):
    # A lazy view: the stream is read a page at a time, never held as one list.
    assert not isinstance(items, list), type(items)
    return sum(items)

@dag(schedule=None)
def whole():
    items = stream_of(50, task_id="produce").output
    handle.expand(item=items)
    total(items.filter(lambda item: item["n"] % 2).map(lambda item: item["n"]))

whole()
""",
    )
    harness.parse()
    pk = harness.trigger("whole")
    assert harness.run(pk)["state"] == "success"
    states = harness.states(pk)
    assert [states[f"handle[{i}]"] for i in range(50)] == ["success"] * 50
    assert harness.xcom(pk, "total") == sum(range(1, 50, 2))


def test_batched_and_concat_over_a_mapped_source_leave_out_its_skipped_items(
    harness: DagHarness, write_dag: WriteDag, dags_folder: Path
) -> None:
    write_dag(
        "mapped_sources.py",
        HEADER
        + """
@task
def keep_even(n):
    return n

@task
def batch(items):
    record("batches.txt", ",".join(map(str, items)))

@task
def each(item):
    record("each.txt", item)

@dag(schedule=None)
def mapped_sources():
    evens = keep_even.iterate(n=stream_of(5, task_id="produce").output.map(lambda i: i["n"])
                              .filter(lambda n: n % 2 == 0))
    batch.iterate(items=evens.batched(2))
    each.iterate(item=evens.concat(["end"]))

mapped_sources()
""",
    )
    harness.parse()
    pk = harness.trigger("mapped_sources")
    assert harness.run(pk)["state"] == "success"
    # keep_even: 0, 2, 4 ran; 1, 3 were filtered out (skipped, no output).
    assert sorted(lines(dags_folder, "batches.txt")) == ["0", "2", "4"]
    assert sorted(lines(dags_folder, "each.txt")) == ["0", "2", "4", "end"]
    states = harness.states(pk)
    assert [states[f"each[{i}]"] for i in range(6)] == [
        "success",
        "skipped",
        "success",
        "skipped",
        "success",
        "success",
    ]


def test_a_task_that_yields_streams_its_output_to_iterate_while_it_runs(
    harness: DagHarness, write_dag: WriteDag, dags_folder: Path
) -> None:
    # The generator waits after its first item until that item has been handled
    # downstream: only an output streamed while the task runs lets this finish.
    write_dag(
        "generated.py",
        HEADER
        + """
@task
def pages():
    for page in range(4):
        if page == 1:
            wait_for_gate("handled_0")  # page 0 handled while pages() still runs
        yield {"page": page, "rows": [page] * 3}

@task
def handle(page):
    (HERE / f"handled_{page['page']}").touch()
    return sum(page["rows"])

@task
def total(values):
    return sum(values)

@dag(schedule=None)
def generated():
    total(handle.iterate(page=pages()))

generated()
""",
    )
    harness.parse()
    pk = harness.trigger("generated")
    assert harness.run(pk)["state"] == "success"
    assert harness.stream_items(pk, "pages") == [{"page": p, "rows": [p] * 3} for p in range(4)]
    assert harness.xcom(pk, "total") == 3 * (0 + 1 + 2 + 3)
    assert harness.xcom(pk, "pages") is None  # the output is the stream, not one value


def test_slow_consumers_hold_a_batch_handling_producer_too(
    harness: DagHarness, write_dag: WriteDag, dags_folder: Path
) -> None:
    write_dag(
        "held_batches.py",
        HEADER
        + """
class Relay(BaseOperator):
    # Defers to Items and passes each event's payload on, in batches of two.
    def execute(self, context):
        self.defer(trigger=Items(40), method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):
        for event in events:
            yield event.payload

# One slot for the consumers: the relay's batches need a worker too.
@task(max_active_tis_per_dagrun=1)
def slow(item):
    wait_for_gate("gate")
    record("handled.txt", item["n"])

@dag(schedule=None)
def held_batches():
    slow.iterate(item=Relay(task_id="relay", max_pending_events=5, max_batch_size=2).output)

held_batches()
""",
    )
    harness.parse()
    pk = harness.trigger("held_batches")

    with harness.running():
        summary = wait_until_held(harness, pk, items=5)
        # The handler is not given more batches while five items wait downstream (one
        # batch may overshoot by at most max_batch_size - 1); the trigger then pauses.
        items = summary["items"]
        assert 5 <= items <= 6
        assert sum(1 for name in harness.states(pk) if name.startswith("slow[")) == items
        assert int((dags_folder / "produced.txt").read_text()) <= items + 6
        (dags_folder / "gate").touch()
        wait_for(lambda: harness.is_finished(pk), timeout=60)
    assert harness.summary(pk)["state"] == "success"
    assert sorted(map(int, lines(dags_folder, "handled.txt"))) == list(range(40))


def test_a_run_summary_can_list_the_first_instances_and_count_the_rest(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag(
        "many.py",
        HEADER
        + """
@task
def numbers():
    yield from range(30)

@task
def check(n):
    return n

@dag(schedule=None)
def many():
    check.iterate(n=numbers().filter(lambda n: n % 3))

many()
""",
    )
    harness.parse()
    pk = harness.trigger("many")
    assert harness.run(pk)["state"] == "success"
    with harness.engine.connect() as conn:
        summary = run_summary(conn, pk, instances_per_task=5)
    listed = [ti["map_index"] for ti in summary["task_instances"] if ti["task_id"] == "check"]
    assert listed == [0, 1, 2, 3, 4]
    assert summary["mapped"] == {
        "check": {"instances": 30, "states": {"success": 20, "skipped": 10}}
    }
