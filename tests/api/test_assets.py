"""Assets through the REST API: listings, an external event that starts a consumer run,
what a DAG still waits for, the graph of DAGs linked by assets."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from tailrace.testing import DagHarness, wait_for

from .conftest import DAGS, Api

ASSET_DAGS = """
    from datetime import datetime
    from tailrace import Asset, dag, task

    landed = Asset("s3://lake/landed.csv", extra={"team": "data"})
    approved = Asset("approved")

    @dag(schedule=landed)
    def on_landed():
        @task(outlets=[Asset("cleaned")])
        def clean(*, triggering_asset_events):
            (event,) = triggering_asset_events[landed]
            return event.extra["rows"]

        clean()

    on_landed()

    @dag(schedule=landed & approved)
    def on_both():
        @task
        def go():
            return 1

        go()

    on_both()
"""


@pytest.fixture
def dags_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "dags"
    folder.mkdir()
    for name, source in {**DAGS, "api_assets.py": ASSET_DAGS}.items():
        (folder / name).write_text(textwrap.dedent(source))
    return folder


def _runs(api: Api, dag_id: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = api.viewer.get(f"/dags/{dag_id}/runs").json()["items"]
    return items


def test_an_external_event_starts_the_consumer_and_is_listed(api: Api, harness: DagHarness) -> None:
    assets = {a["name"]: a for a in api.viewer.get("/assets").json()["items"]}
    assert assets["s3://lake/landed.csv"]["consumers"] == ["on_both", "on_landed"]
    assert assets["s3://lake/landed.csv"]["extra"] == {"team": "data"}
    assert assets["cleaned"]["producers"] == ["on_landed.clean"]
    waiting = api.viewer.get("/dags/on_both/assets/waiting").json()
    assert waiting["missing"] == ["s3://lake/landed.csv", "approved"]
    assert waiting["description"] == "s3://lake/landed.csv & approved"
    with harness.running():
        r = api.admin.post(
            "/assets/events", json={"asset": "s3://lake/landed.csv", "extra": {"rows": 42}}
        )
        assert r.status_code == 201, r.text
        event = r.json()
        assert (event["asset"], event["extra"], event["source_dag_id"]) == (
            "s3://lake/landed.csv",
            {"rows": 42},
            None,
        )
        run = wait_for(
            lambda: next((r for r in _runs(api, "on_landed") if r["state"] == "success"), None),
            timeout=60,
        )
    assert run["run_type"] == "asset_triggered"
    tis = api.viewer.get(f"/dags/on_landed/runs/{run['run_id']}/task-instances").json()["items"]
    assert [t["state"] for t in tis] == ["success"]
    # The consumer's own outlet emitted an event; on_both still waits for approval.
    cleaned = api.viewer.get("/assets/events", params={"asset": "cleaned"}).json()["items"]
    assert [(e["source_dag_id"], e["source_task_id"]) for e in cleaned] == [("on_landed", "clean")]
    waiting = api.viewer.get("/dags/on_both/assets/waiting").json()
    assert (waiting["missing"], waiting["queued_events"]) == (["approved"], 1)
    assert _runs(api, "on_both") == []
    graph = api.viewer.get("/assets/graph").json()
    edges = {(e["source"], e["target"]) for e in graph["edges"]}
    assert ("asset:s3://lake/landed.csv", "dag:on_landed") in edges
    assert ("dag:on_landed", "asset:cleaned") in edges


def test_external_events_are_checked(api: Api, harness: DagHarness) -> None:
    unknown = api.admin.post("/assets/events", json={"asset": "nope"})
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "asset_not_found"
    assert "'nope'" in unknown.json()["error"]["message"]
    viewer = api.viewer.post("/assets/events", json={"asset": "approved"})
    assert viewer.status_code == 403
    big = api.admin.post(
        "/assets/events", json={"asset": "approved", "extra": {"x": "y" * 2_000_000}}
    )
    assert big.status_code == 413
    first = api.admin.post("/assets/events", json={"asset": "approved", "dedup_key": "msg-1"})
    again = api.admin.post("/assets/events", json={"asset": "approved", "dedup_key": "msg-1"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    events = api.viewer.get("/assets/events", params={"asset": "approved"}).json()["items"]
    assert len(events) == 1
    manual = api.viewer.get("/dags/api_basic/assets/waiting")
    assert manual.status_code == 404
    assert manual.json()["error"]["code"] == "not_asset_scheduled"
