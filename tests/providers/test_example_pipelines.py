"""The paged-API-to-database examples against the demo API, and the demo API that
`tailrace standalone` serves for them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine

from tailrace.config import EXAMPLE_DAGS_FOLDER, load_settings
from tailrace.demo_api import DemoApiConfig, running_demo_api
from tailrace.providers.sql import SqlHook
from tailrace.standalone import Services
from tailrace.testing import DagHarness


@pytest.fixture
def examples(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[DagHarness, str]]:
    warehouse = f"sqlite:///{tmp_path / 'orders.db'}"
    monkeypatch.setenv("TAILRACE_CONN_EXAMPLE_ORDERS_DB", warehouse)
    with running_demo_api(DemoApiConfig(page_size=4, pages=5)) as url:
        monkeypatch.setenv("TAILRACE_CONN_DEMO_API", url)
        with DagHarness(engine, EXAMPLE_DAGS_FOLDER, log_folder=tmp_path / "logs") as h:
            yield h, warehouse


@pytest.mark.parametrize("db_backend", ["sqlite"])
@pytest.mark.parametrize(
    ("dag_id", "fetch_workers"),
    [("example_api_to_db_streaming", 0), ("example_api_to_db_classic", 1 + 5)],
)
def test_every_page_lands_in_the_table_once(
    examples: tuple[DagHarness, str], dag_id: str, fetch_workers: int
) -> None:
    h, warehouse = examples
    assert h.parse().import_errors == 0
    pk = h.trigger(dag_id)
    assert h.run(pk, timeout=120)["state"] == "success"
    ids = [r["id"] for r in SqlHook(url=warehouse).get_records("SELECT id FROM orders")]
    assert sorted(ids) == list(range(1, 21))
    fetch = h.task_instance(pk, "fetch_orders").id
    # Streaming: the pages never touch a worker. Classic: one start, one resume per page.
    assert h.dispatched.count(fetch) == fetch_workers


def test_standalone_serves_the_demo_api_for_the_bundled_examples(
    tailrace_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TAILRACE_CONN_DEMO_API", raising=False)
    settings = load_settings({"TAILRACE_HOME": str(tailrace_home)})
    assert settings.dags_folder == EXAMPLE_DAGS_FOLDER
    services = Services(settings, scheduler_enabled=False, triggerer_enabled=False, demo_api=True)
    services.start()
    try:
        assert services.demo_api_url is not None
        assert os.environ["TAILRACE_CONN_DEMO_API"] == services.demo_api_url
        assert httpx.get(f"{services.demo_api_url}/stats").status_code == 200
    finally:
        services.stop()
    assert "TAILRACE_CONN_DEMO_API" not in os.environ


def test_standalone_leaves_a_configured_demo_api_alone(
    tailrace_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TAILRACE_CONN_DEMO_API", "http://api.example.com")
    settings = load_settings({"TAILRACE_HOME": str(tailrace_home)})
    services = Services(settings, scheduler_enabled=False, triggerer_enabled=False, demo_api=True)
    services.start()
    services.stop()
    assert services.demo_api_url is None
    assert os.environ["TAILRACE_CONN_DEMO_API"] == "http://api.example.com"
