"""A run's deadline alerts in its REST API response: pending, then missed with how its
callback went; one still ahead when the run finishes is gone with it."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from tailrace.config import Settings
from tailrace.testing import DagHarness, wait_for

from .conftest import Api

DAG = """
import os, time
from datetime import datetime, timedelta
from tailrace import DeadlineAlert, DeadlineReference, SyncCallback, dag, task


def page(context, text):
    print(text)


@dag(
    schedule=None,
    start_date=datetime(2026, 1, 1),
    params={"gate": ""},
    deadline=[
        # Long past: missed as soon as the scheduler looks.
        DeadlineAlert(
            reference=DeadlineReference.FIXED_DATETIME(datetime(2026, 1, 1)),
            interval=timedelta(0),
            callback=SyncCallback(page, kwargs={"text": "{{ dag_run.run_id }} is late"}),
            name="new year",
        ),
        DeadlineAlert(
            reference=DeadlineReference.DAGRUN_QUEUED_AT,
            interval=timedelta(days=1),
            callback=SyncCallback(page, kwargs={"text": "a day late"}),
            name="a day",
        ),
    ],
)
def api_deadlines():
    @task
    def gated(**context):
        while not os.path.exists(context["params"]["gate"]):
            time.sleep(0.01)

    gated()

api_deadlines()
"""


def test_a_runs_deadlines_are_in_its_api_response(
    api: Api, harness: DagHarness, settings: Settings, tmp_path: Path
) -> None:
    (Path(settings.dags_folder) / "api_deadlines.py").write_text(textwrap.dedent(DAG))
    harness.parse()
    gate = tmp_path / "gate"
    with harness.running():
        r = api.admin.post("/dags/api_deadlines/runs", json={"conf": {"gate": str(gate)}})
        assert r.status_code == 201, r.text
        run_id = r.json()["run_id"]
        url = f"/dags/api_deadlines/runs/{run_id}"

        def called() -> list[dict[str, Any]] | None:
            found = api.viewer.get(url).json()["deadlines"]
            return found if found[0]["callback_state"] == "success" else None

        first, second = wait_for(called, timeout=60)
        assert (first["name"], first["missed"], first["callback"]) == ("new year", True, "sync")
        assert first["deadline_time"].startswith("2026-01-01T00:00:00")
        assert (second["name"], second["missed"], second["callback"]) == ("a day", False, None)
        gate.touch()
        done = wait_for(
            lambda: (d := api.viewer.get(url).json())["state"] == "success" and d, timeout=60
        )
    assert [(d["name"], d["missed"]) for d in done["deadlines"]] == [("new year", True)]
