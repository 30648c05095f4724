"""``.iterate()``: mapped instances created as a stream's items arrive, run by real workers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tailrace.testing import DagHarness

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
"""


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
