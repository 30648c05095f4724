"""The run page's timeline (a Gantt of each try's queued, running and deferred segments,
trigger runs and event batches) and the grid's duration bars, both naming the run's
trace id. Screenshots of both are saved (``screenshots``) to be looked at."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tailrace.testing._browser import Standalone, run_to_end

from .conftest import standalone_over

DAG = """
import asyncio
from datetime import datetime
from tailrace import BaseOperator, BaseTrigger, TriggerEvent, dag, task

class Ticks(BaseTrigger):
    def __init__(self, n, pause):
        super().__init__()
        self.n = n
        self.pause = pause

    def serialize(self):
        return (f"{type(self).__module__}.Ticks", {"n": self.n, "pause": self.pause})

    async def run(self):
        for i in range(self.n):
            await asyncio.sleep(self.pause)
            yield TriggerEvent(i)

class PageByPage(BaseOperator):
    def execute(self, context):
        self.defer(trigger=Ticks(n=1, pause=0.3), method_name="next_page", kwargs={"page": 0})

    def next_page(self, context, event, page):
        if page < 2:
            self.defer(
                trigger=Ticks(n=1, pause=0.3), method_name="next_page", kwargs={"page": page + 1}
            )
        return page

class Streamed(BaseOperator):
    def execute(self, context):
        self.defer(trigger=Ticks(n=12, pause=0.1), method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):
        for event in events:
            yield event.payload

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def gantt_demo():
    @task
    def prepare():
        import time
        time.sleep(0.3)
        return 1

    paged = PageByPage(task_id="page_by_page")
    prepare() >> [paged, Streamed(task_id="streamed", max_batch_size=4)]

gantt_demo()
"""
DAG_ID = "gantt_demo"


@pytest.fixture(scope="module")
def app(
    tmp_path_factory: pytest.TempPathFactory, chromium_executable: str, module_has_machine: None
) -> Iterator[Standalone]:
    with standalone_over(
        tmp_path_factory,
        {"gantt_demo.py": textwrap.dedent(DAG)},
        {"TAILRACE_LOAD_EXAMPLES": "false"},
    ) as running:
        yield running


def test_the_run_page_draws_each_tries_segments_trigger_runs_and_event_batches(
    app: Standalone, client: httpx.Client, page: Page, screenshots: Path
) -> None:
    assert run_to_end(client, DAG_ID, "gantt_1") == "success"
    data = client.get(f"/ui/dags/{DAG_ID}/runs/gantt_1/timeline").json()
    page.goto(f"{app.url}/#/dags/{DAG_ID}/runs/gantt_1")
    gantt = page.locator("#gantt")
    expect(gantt).to_be_visible()
    expect(page.locator("#trace-id")).to_have_text(data["trace_id"])
    assert len(data["trace_id"]) == 32
    prepare = gantt.locator(".gantt-row[data-task=prepare]")
    expect(prepare.locator("[data-kind=queued]")).to_have_count(1)
    expect(prepare.locator("[data-kind=running]")).to_have_count(1)
    # Three pages, one deferral each: three deferred segments, three trigger runs.
    paged = gantt.locator(".gantt-row[data-task=page_by_page]")
    expect(paged.locator("[data-kind=deferred]")).to_have_count(3)
    expect(paged.locator(".trigger-run")).to_have_count(3)
    expect(paged.locator("[data-kind=running]")).to_have_count(4)
    # Streaming: one trigger run, its twelve events handed on in batches of at most four.
    streamed = gantt.locator(".gantt-row[data-task=streamed]")
    expect(streamed.locator(".trigger-run")).to_have_count(1)
    batches = next(t for t in data["tasks"] if t["task_id"] == "streamed")["event_batches"]
    assert sum(b["count"] for b in batches) == 12 and all(b["count"] <= 4 for b in batches)
    expect(streamed.locator(".event-batch")).to_have_count(len(batches))
    # Bars are placed by time: prepare's running ends before page_by_page's first queue.
    prepare_end = _right(prepare.locator("[data-kind=running]"))
    assert prepare_end <= _left(paged.locator("[data-kind=queued]").first) + 1
    page.locator("#timeline").scroll_into_view_if_needed()
    page.screenshot(path=screenshots / "run-timeline.png", full_page=True)


def _left(locator: Any) -> float:
    box = locator.bounding_box()
    assert box is not None
    return float(box["x"])


def _right(locator: Any) -> float:
    box = locator.bounding_box()
    assert box is not None
    return float(box["x"] + box["width"])


def test_the_grid_draws_each_runs_duration_and_names_its_trace(
    app: Standalone, client: httpx.Client, page: Page, screenshots: Path
) -> None:
    assert run_to_end(client, DAG_ID, "gantt_2") == "success"
    grid = client.get(f"/ui/dags/{DAG_ID}/grid").json()
    page.goto(f"{app.url}/#/dags/{DAG_ID}/grid")
    for run in grid["items"]:
        column = page.locator(f"th.run-col[data-trace-id='{run['trace_id']}']")
        expect(column).to_have_count(1)
        title = column.get_attribute("title") or ""
        assert run["run_id"] in title and f"trace {run['trace_id']}" in title
    bars = page.locator("th.run-col .runbar")
    expect(bars).to_have_count(len(grid["items"]))
    heights = [b["height"] for b in (bars.nth(i).bounding_box() for i in range(bars.count())) if b]
    assert max(heights) == pytest.approx(40, abs=1), "the longest run fills the track"
    page.screenshot(path=screenshots / "grid-durations.png")
