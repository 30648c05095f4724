"""Backfills over the REST API, with Airflow 3's routes and bodies, run by a real
scheduler that hears the API's wake-ups."""

from __future__ import annotations

import textwrap
from pathlib import Path

import httpx
import pytest

from tailrace.testing import DagHarness

from .conftest import Api

DAG = """
from datetime import datetime
from tailrace import dag, task

# No scheduled runs: the schedule ended before the backfilled days.
@dag(schedule="@daily", start_date=datetime(2026, 1, 1), end_date=datetime(2026, 2, 1))
def api_daily():
    @task
    def work(ds=None):
        return ds

    work()

api_daily()

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def api_manual():
    @task
    def work():
        return 1

    work()

api_manual()
"""

BODY = {"dag_id": "api_daily", "from_date": "2026-11-01", "to_date": "2026-11-04T00:00:00Z"}


@pytest.fixture
def dags_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "api_daily.py").write_text(textwrap.dedent(DAG))
    return folder


def _runs(api: Api) -> list[dict[str, object]]:
    items: list[dict[str, object]] = api.viewer.get("/dags/api_daily/runs").json()["items"]
    return items


def test_a_backfill_is_created_run_listed_and_then_complete(api: Api, harness: DagHarness) -> None:
    dry = api.admin.post("/backfills/dry_run", json=BODY)
    assert dry.status_code == 200, dry.text
    assert [b["logical_date"] for b in dry.json()["backfills"]] == [
        f"2026-11-0{d}T00:00:00Z" for d in range(1, 5)
    ]
    assert api.viewer.post("/backfills", json=BODY).status_code == 403
    created = api.admin.post("/backfills", json={**BODY, "max_active_runs": 2})
    assert created.status_code == 200, created.text
    backfill = created.json()
    assert backfill["max_active_runs"] == 2 and backfill["reprocess_behavior"] == "none"
    assert backfill["completed_at"] is None and backfill["is_paused"] is False
    # One at a time per DAG.
    again = api.admin.post("/backfills", json=BODY)
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "backfill_running"

    assert harness.scheduler.run_until(
        lambda: [r["state"] for r in _runs(api)] == ["success"] * 4, timeout=120
    )
    runs = _runs(api)
    assert {(r["run_type"], r["backfill_id"]) for r in runs} == {("backfill", backfill["id"])}
    done = api.viewer.get(f"/backfills/{backfill['id']}").json()
    assert done["completed_at"] is not None
    listed = api.viewer.get("/backfills", params={"dag_id": "api_daily"}).json()
    assert listed["total_entries"] == 1 and listed["backfills"][0]["id"] == backfill["id"]
    refused = api.admin.put(f"/backfills/{backfill['id']}/pause")
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "backfill_completed"
    # Every day has a run now: reprocess "none" would create nothing.
    assert api.admin.post("/backfills/dry_run", json=BODY).json()["total_entries"] == 0


def test_pause_unpause_and_cancel_on_airflows_paths(api: Api, harness: DagHarness) -> None:
    # An Airflow client calls /api/v2/...: the same routes answer there.
    v2 = httpx.Client(
        base_url=api.url.removesuffix("/api/v1") + "/api/v2",
        headers=dict(api.admin.headers),
        timeout=30,
    )
    with v2:
        created = v2.post("/backfills", json={**BODY, "max_active_runs": 1})
        assert created.status_code == 200, created.text
        backfill_id = created.json()["id"]
        paused = v2.put(f"/backfills/{backfill_id}/pause")
        assert paused.json()["is_paused"] is True
        harness.scheduler.wake()
        harness.scheduler.step()
        assert {r["state"] for r in _runs(api)} == {"queued"}
        assert v2.put(f"/backfills/{backfill_id}/unpause").json()["is_paused"] is False
        cancelled = v2.put(f"/backfills/{backfill_id}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["completed_at"] is not None
        assert v2.put(f"/backfills/{backfill_id}/cancel").status_code == 409
        assert v2.get("/backfills/999999").status_code == 404
    assert harness.scheduler.run_until(
        lambda: all(r["state"] in ("success", "failed") for r in _runs(api)), timeout=120
    )
    # Unpaused, the first run may have started before the cancel: the rest never ran.
    assert sorted(r["state"] for r in _runs(api))[:3] == ["failed"] * 3


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({**BODY, "dag_id": "api_manual"}, 422, "non-periodic schedule"),
        ({**BODY, "dag_id": "nope"}, 404, "nope"),
        ({**BODY, "from_date": "2026-11-09"}, 422, "must not be after"),
        ({**BODY, "from_date": "2999-01-01", "to_date": "2999-02-01"}, 422, "future dates"),
        ({**BODY, "reprocess_behavior": "sometimes"}, 422, "reprocess_behavior"),
        ({**BODY, "max_active_runs": 0}, 422, "max_active_runs"),
        ({**BODY, "run_on_latest_version": True}, 422, "run_on_latest_version"),
    ],
)
def test_bad_requests_say_what_is_wrong(
    api: Api, harness: DagHarness, body: dict[str, object], status: int, message: str
) -> None:
    answer = api.admin.post("/backfills", json=body)
    assert answer.status_code == status, answer.text
    assert message in answer.text
