"""The assets page lists assets and draws the DAGs they link; an asset-scheduled DAG's page
says what its next run still waits for. One `tailrace standalone`; screenshots saved."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from tailrace.testing import wait_for
from tailrace.testing._browser import Standalone, run_to_end

from .conftest import standalone_over

SOURCE = """
from datetime import datetime
from tailrace import Asset, dag, task

raw = Asset("s3://lake/raw/orders.csv")
rates = Asset("fx-rates")
clean = Asset("warehouse.orders")

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def ingest_orders():
    @task(outlets=[raw])
    def land():
        return 1

    land()

ingest_orders()

@dag(schedule=raw)
def clean_orders():
    @task(outlets=[clean])
    def tidy():
        return 1

    tidy()

clean_orders()

@dag(schedule=clean & rates)
def revenue_report():
    @task
    def report():
        return 1

    report()

revenue_report()
"""


@pytest.fixture(scope="module")
def app(
    tmp_path_factory: pytest.TempPathFactory, chromium_executable: str, module_has_machine: None
) -> Iterator[Standalone]:
    with standalone_over(
        tmp_path_factory,
        {"assets_demo.py": textwrap.dedent(SOURCE)},
        {"TAILRACE_DAGS_ARE_PAUSED_AT_CREATION": "false"},
    ) as running:
        yield running


@pytest.fixture(scope="module")
def produced(client: httpx.Client) -> None:
    """ingest_orders ran, so clean_orders ran and emitted warehouse.orders: the report
    then waits for fx-rates only."""
    assert run_to_end(client, "ingest_orders", "first") == "success"

    def cleaned() -> bool:
        events = client.get("/assets/events", params={"asset": "warehouse.orders"}).json()
        return bool(events["items"])

    wait_for(cleaned, timeout=60)


def test_the_assets_page_lists_assets_and_draws_the_dags_they_link(
    app: Standalone, produced: None, page: Page, screenshots: Path
) -> None:
    page.goto(f"{app.url}/#/assets")
    row = page.locator("tr[data-asset='s3://lake/raw/orders.csv']")
    expect(row).to_contain_text("ingest_orders.land")
    expect(row).to_contain_text("clean_orders")
    expect(row.locator("td.right")).to_have_text("1")
    graph = page.locator("#asset-graph")
    for node in (
        "dag:ingest_orders",
        "asset:s3://lake/raw/orders.csv",
        "dag:clean_orders",
        "asset:warehouse.orders",
        "dag:revenue_report",
        "asset:fx-rates",
    ):
        expect(graph.locator(f"[data-node='{node}']")).to_be_visible()
    page.screenshot(path=screenshots / "assets.png", full_page=True)
    graph.locator("[data-node='dag:clean_orders']").click()
    expect(page.locator("h1")).to_have_text("clean_orders")


def test_a_dag_waiting_on_assets_shows_what_it_still_waits_for(
    app: Standalone, produced: None, page: Page, screenshots: Path
) -> None:
    page.goto(f"{app.url}/#/dags/revenue_report")
    panel = page.locator("#asset-waiting")
    expect(panel).to_contain_text("Waiting for fx-rates")
    expect(panel.locator(".asset-met")).to_have_text("✓ warehouse.orders")
    expect(panel.locator(".asset-missing")).to_have_text("… fx-rates")
    expect(panel).to_contain_text("1 event queued")
    page.screenshot(path=screenshots / "asset-waiting.png")
