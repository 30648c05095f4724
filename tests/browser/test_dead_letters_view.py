"""The stream view shows a stream's dead letters: how many, and the latest with the try
that failed last and its error. One `tailrace standalone` over a DAG whose consumer can
never handle one page (`stream_retry="dead_letter"`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from tailrace.testing._browser import Standalone, run_to_end

from .conftest import standalone_over

DAG = """
import asyncio
from datetime import datetime
from tailrace import BaseOperator, BaseTrigger, TriggerEvent, dag


class Pages(BaseTrigger):
    def __init__(self, count):
        super().__init__()
        self.count = count

    def serialize(self):
        return (f"{__name__}.Pages", {"count": self.count})

    async def run(self):
        for page in range(self.count):
            yield TriggerEvent({"page": page})
            await asyncio.sleep(0)


class Poisoned(BaseOperator):
    def execute(self, context):
        self.defer(trigger=Pages(12), method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):
        if any(e.payload["page"] == 5 for e in events):
            raise ValueError("page 5 is malformed")
        for event in events:
            yield event.payload["page"]


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def poisoned():
    Poisoned(task_id="consume", retries=1, retry_delay=0, max_batch_size=2,
             max_pending_events=4, stream_retry="dead_letter")


poisoned()
"""


@pytest.fixture(scope="module")
def app(
    tmp_path_factory: pytest.TempPathFactory, chromium_executable: str, module_has_machine: None
) -> Iterator[Standalone]:
    with standalone_over(tmp_path_factory, {"poisoned.py": DAG}) as running:
        yield running


def test_the_stream_view_shows_the_dead_letters_of_a_stream_that_went_on(
    app: Standalone, client: httpx.Client, page: Page, screenshots: Path
) -> None:
    assert run_to_end(client, "poisoned", "poison") == "success"
    (stream,) = client.get("/streams", params={"dag_id": "poisoned"}).json()["items"]
    letters = client.get("/streams/dead-letters", params={"dag_id": "poisoned"}).json()["items"]
    assert stream["dead_letters"] == len(letters) >= 1
    page.goto(f"{app.url}/#/dags/poisoned/runs/poison/streams")
    card = page.locator("[data-stream=consume]")
    expect(card.locator("#dead-consume")).to_have_text(str(len(letters)))
    rows = card.locator(".dead-letters li")
    expect(rows).to_have_count(len(letters))
    # Newest first, each with the try that failed last and its error's last line.
    newest = max(letters, key=lambda d: d["id"])
    expect(rows.first).to_contain_text(f"#{newest['sequence_index']}")
    expect(rows.first).to_contain_text("try 2")
    expect(rows.first).to_contain_text("ValueError: page 5 is malformed")
    # The stream went on past them: every other page is in its output.
    expect(card.locator("#items-consume")).to_have_text(str(12 - len(letters)))
    page.screenshot(path=screenshots / "stream-dead-letters.png", full_page=True)
