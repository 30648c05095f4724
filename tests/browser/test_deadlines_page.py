"""A run's page shows its missed deadline and how the callback went. One `tailrace
standalone` over a DAG whose deadline passed long ago, so every run misses it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from tailrace.testing import wait_for
from tailrace.testing._browser import Standalone, run_to_end

from .conftest import standalone_over

DAG = """
from datetime import datetime, timedelta
from tailrace import DeadlineAlert, DeadlineReference, SyncCallback, dag, task


def page(context, text):
    print(text)


@dag(
    schedule=None,
    start_date=datetime(2026, 1, 1),
    deadline=DeadlineAlert(
        reference=DeadlineReference.FIXED_DATETIME(datetime(2026, 1, 1)),
        interval=timedelta(0),
        callback=SyncCallback(page, kwargs={"text": "{{ dag_run.run_id }} is late"}),
        name="new year",
    ),
)
def late_page():
    @task
    def work():
        return 1

    work()


late_page()
"""


@pytest.fixture(scope="module")
def app(
    tmp_path_factory: pytest.TempPathFactory, chromium_executable: str, module_has_machine: None
) -> Iterator[Standalone]:
    with standalone_over(tmp_path_factory, {"late_page.py": DAG}) as running:
        yield running


def test_the_run_page_shows_a_missed_deadline_and_its_callback(
    app: Standalone, client: httpx.Client, page: Page, screenshots: Path
) -> None:
    assert run_to_end(client, "late_page", "late") == "success"

    def called() -> bool:
        found = client.get("/dags/late_page/runs/late").json()["deadlines"]
        return bool(found) and found[0]["callback_state"] == "success"

    wait_for(called, timeout=60, interval=0.2)
    page.goto(f"{app.url}/#/dags/late_page/runs/late")
    card = page.locator("#deadlines")
    expect(card.locator(".deadline.missed")).to_contain_text("new year")
    expect(card).to_contain_text("sync callback success")
    page.screenshot(path=screenshots / "run-deadlines.png")
