"""The run timeline: segments of each try, event batches and trigger runs, kept by a
transition hook and read back for the run page's Gantt."""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

from sqlalchemy import Engine, select

from tailrace.clock import utcnow
from tailrace.db.models import TaskInstance, TaskTimeline
from tailrace.testing import DagHarness, wait_for
from tailrace.tracing.timeline import run_timeline, trim_timelines

DAG = """
import asyncio
from datetime import datetime
from tailrace import BaseOperator, BaseTrigger, TriggerEvent, dag, task

class Ticks(BaseTrigger):
    def __init__(self, n):
        super().__init__()
        self.n = n

    def serialize(self):
        return (f"{type(self).__module__}.Ticks", {"n": self.n})

    async def run(self):
        for i in range(self.n):
            await asyncio.sleep(0.02)
            yield TriggerEvent(i)

class Twice(BaseOperator):
    def execute(self, context):
        self.defer(trigger=Ticks(n=1), method_name="again")

    def again(self, context, event):
        self.defer(trigger=Ticks(n=1), method_name="finish")

    def finish(self, context, event):
        return "done"

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def timeline():
    @task
    def first():
        return 1

    first() >> Twice(task_id="twice")

timeline()
"""


def test_a_run_timeline_has_each_tries_segments_and_its_trigger_runs(
    engine: Engine, dags_folder: Path, tmp_path: Path
) -> None:
    (dags_folder / "timeline.py").write_text(textwrap.dedent(DAG))
    with DagHarness(engine, dags_folder, log_folder=tmp_path / "logs") as harness:
        harness.parse()
        run_id = harness.trigger("timeline")
        assert harness.run(run_id)["state"] == "success"
    with engine.connect() as conn:
        tasks = {t["task_id"]: t for t in run_timeline(conn, run_id, utcnow())}
    assert list(tasks) == ["first", "twice"], "by when they began"
    (first_try,) = tasks["first"]["tries"]
    assert [s["kind"] for s in first_try["segments"]] == ["queued", "running"]
    assert first_try["state"] == "success" and first_try["try_number"] == 1
    twice = tasks["twice"]
    (try_,) = twice["tries"]
    kinds = [s["kind"] for s in try_["segments"]]
    # It ran, deferred, resumed with the event, deferred again, resumed and finished.
    assert kinds == ["queued", "running"] + ["deferred", "queued", "running"] * 2
    segments = try_["segments"]
    assert all(a["end"] <= b["start"] for a, b in itertools.pairwise(segments))
    assert not any(s["open"] for s in segments)
    assert len(twice["event_batches"]) == 2 and all(b["count"] == 1 for b in twice["event_batches"])
    assert len(twice["trigger_runs"]) == 2, "one trigger (and run) per deferral"
    for run, deferred in zip(
        twice["trigger_runs"], [s for s in segments if s["kind"] == "deferred"], strict=True
    ):
        assert run["start"] <= deferred["end"] and run["end"] <= deferred["end"]


STREAMING = """
import asyncio
from datetime import datetime
from tailrace import BaseOperator, BaseTrigger, TriggerEvent, dag

class Ticks(BaseTrigger):
    def serialize(self):
        return (f"{type(self).__module__}.Ticks", {})

    async def run(self):
        i = 0
        while True:
            await asyncio.sleep(0.01)
            yield TriggerEvent(i)
            i += 1

class Consume(BaseOperator):
    def execute(self, context):
        self.defer(trigger=Ticks(), method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):
        return None

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def endless_timeline():
    Consume(task_id="consume", max_batch_size=1)

endless_timeline()
"""


def test_an_endless_streams_timeline_keeps_its_newest_rows(
    engine: Engine, dags_folder: Path, tmp_path: Path
) -> None:
    (dags_folder / "endless_timeline.py").write_text(textwrap.dedent(STREAMING))
    with DagHarness(engine, dags_folder, log_folder=tmp_path / "logs") as harness:
        harness.parse()
        run_id = harness.trigger("endless_timeline")
        with harness.running():
            # A batch of one event at a time: five rows a batch, while it streams.
            wait_for(lambda: len(_rows(engine, run_id)) >= 40, timeout=60)
        # The scheduler loop stopped: nothing writes the timeline while it is trimmed.
        with engine.connect() as conn:
            (trigger_id,) = conn.scalars(
                select(TaskInstance.trigger_id).where(TaskInstance.dag_run_id == run_id)
            )
        before = _rows(engine, run_id)
        with engine.begin() as conn:
            deleted = trim_timelines(conn, [trigger_id], keep=10)
        after = _rows(engine, run_id)
    assert deleted == len(before) - 10
    assert after == before[-10:], "the newest rows are kept"


def _rows(engine: Engine, run_id: int) -> list[int]:
    with engine.connect() as conn:
        return list(
            conn.scalars(
                select(TaskTimeline.id)
                .where(TaskTimeline.dag_run_id == run_id)
                .order_by(TaskTimeline.id)
            )
        )
