"""Human in the loop (Airflow 3.1's HITL operators) end to end: the task waits in the
triggerer, holding no worker, until a response is given through the REST API, or its
response_timeout takes the defaults."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from sqlalchemy import select

from tailrace.db.models import TaskInstance
from tailrace.testing import DagHarness, wait_for

from .conftest import Api

DAGS = """
from datetime import datetime, timedelta
from tailrace import (
    ApprovalOperator, EmptyOperator, HITLBranchOperator, HITLOperator, Param, dag,
)


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def hitl_approval():
    approve = ApprovalOperator(task_id="approve", subject="Ship run {{ run_id }}?")
    approve >> EmptyOperator(task_id="ship")


hitl_approval()


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def hitl_choice():
    choose = HITLBranchOperator(
        task_id="choose",
        subject="Which way?",
        options=["fast", "slow"],
        options_mapping={"fast": "fast_path"},
        params={"note": Param("", type="string")},
    )
    choose >> [EmptyOperator(task_id="fast_path"), EmptyOperator(task_id="slow")]


hitl_choice()


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def hitl_timeout():
    HITLOperator(
        task_id="ask", subject="Anyone?", options=["yes", "no"], defaults="no",
        response_timeout=timedelta(seconds=1),
    )
    HITLOperator(
        task_id="ask_no_default", subject="Anyone at all?", options=["yes"],
        response_timeout=timedelta(seconds=1),
    )


hitl_timeout()
"""


@pytest.fixture
def dags_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "hitl_dags.py").write_text(textwrap.dedent(DAGS))
    return folder


@pytest.fixture
def running(harness: DagHarness) -> Iterator[DagHarness]:
    with harness.running() as h:
        yield h


def _trigger(api: Api, dag_id: str) -> str:
    created = api.admin.post(f"/dags/{dag_id}/runs", json={})
    assert created.status_code == 201, created.text
    run_id: str = created.json()["run_id"]
    return run_id


def _path(dag_id: str, run_id: str, task_id: str) -> str:
    return f"/hitlDetails/{dag_id}/{quote(run_id, safe='')}/{task_id}"


def _waiting(api: Api, path: str) -> dict[str, Any]:
    def asked() -> dict[str, Any] | None:
        answer = api.viewer.get(path)
        return answer.json() if answer.status_code == 200 else None

    found: dict[str, Any] = wait_for(asked, timeout=60)
    return found


def _states(api: Api, dag_id: str, run_id: str) -> dict[str, Any]:
    tis = api.viewer.get(f"/dags/{dag_id}/runs/{quote(run_id, safe='')}/task-instances").json()
    return {t["task_id"]: t["state"] for t in tis["items"]}


def _run_state(api: Api, dag_id: str, run_id: str) -> str | None:
    state: str | None = api.viewer.get(f"/dags/{dag_id}/runs/{quote(run_id, safe='')}").json()[
        "state"
    ]
    return state if state in ("success", "failed") else None


def test_an_approval_given_through_the_api_resumes_the_task(api: Api, running: DagHarness) -> None:
    run_id = _trigger(api, "hitl_approval")
    path = _path("hitl_approval", run_id, "approve")
    request = _waiting(api, path)
    assert request["subject"] == f"Ship run {run_id}?"
    assert request["options"] == ["Approve", "Reject"] and request["response_received"] is False
    # Waiting in the triggerer: deferred, its one try handed to a worker once, to start.
    assert _states(api, "hitl_approval", run_id)["approve"] == "deferred"
    with running.engine.connect() as conn:
        ti_id = conn.scalar(
            select(TaskInstance.id).where(
                TaskInstance.run_id == run_id, TaskInstance.task_id == "approve"
            )
        )
    assert running.dispatched.count(ti_id) == 1
    pending = api.viewer.get("/hitlDetails", params={"response_received": False}).json()
    assert [d["task_id"] for d in pending["hitl_details"]] == ["approve"]

    unasked = api.admin.patch(
        _path("hitl_approval", run_id, "ship"), json={"chosen_options": ["x"]}
    )
    assert unasked.status_code == 404 and "has asked nothing" in unasked.text
    assert api.viewer.patch(path, json={"chosen_options": ["Approve"]}).status_code == 403
    wrong = api.admin.patch(path, json={"chosen_options": ["Maybe"]})
    assert wrong.status_code == 422 and "Maybe" in wrong.text
    answered = api.admin.patch(path, json={"chosen_options": ["Approve"]})
    assert answered.status_code == 200, answered.text
    assert answered.json()["responded_by"] == "ada"
    assert api.admin.patch(path, json={"chosen_options": ["Reject"]}).status_code == 409

    assert wait_for(lambda: _run_state(api, "hitl_approval", run_id), timeout=60) == "success"
    assert _states(api, "hitl_approval", run_id) == {"approve": "success", "ship": "success"}
    [pk] = running.runs("hitl_approval")
    result = running.xcom(pk, "approve")
    assert (result["chosen_options"], result["responded_by_user"]) == (["Approve"], "ada")


def test_a_cleared_hitl_task_asks_again_and_takes_a_new_response(
    api: Api, running: DagHarness
) -> None:
    run_id = _trigger(api, "hitl_approval")
    path = _path("hitl_approval", run_id, "approve")
    _waiting(api, path)
    assert api.admin.patch(path, json={"chosen_options": ["Approve"]}).status_code == 200
    assert wait_for(lambda: _run_state(api, "hitl_approval", run_id), timeout=60) == "success"
    ti = f"/dags/hitl_approval/runs/{quote(run_id, safe='')}/task-instances/approve"
    assert api.admin.post(f"{ti}/clear").status_code == 200

    def asked_again() -> dict[str, Any] | None:
        found = api.viewer.get(path).json()
        waits = not found["response_received"] and found["task_instance_state"] == "deferred"
        return found if waits else None

    again = wait_for(asked_again, timeout=60)
    assert (again["chosen_options"], again["responded_by"]) == (None, None)
    assert api.admin.patch(path, json={"chosen_options": ["Reject"]}).status_code == 200
    assert wait_for(lambda: _run_state(api, "hitl_approval", run_id), timeout=60) == "success"
    [pk] = running.runs("hitl_approval")
    assert running.xcom(pk, "approve")["chosen_options"] == ["Reject"]


def test_a_branch_follows_the_chosen_option_given_on_airflows_path(
    api: Api, running: DagHarness
) -> None:
    run_id = _trigger(api, "hitl_choice")
    path = _path("hitl_choice", run_id, "choose")
    assert _waiting(api, path)["params"]["note"]["schema"] == {"type": "string"}
    bad = api.admin.patch(path, json={"chosen_options": ["fast"], "params_input": {"note": 5}})
    assert bad.status_code == 422 and "note" in bad.text
    v2 = httpx.Client(
        base_url=api.url.removesuffix("/api/v1") + "/api/v2",
        headers=dict(api.admin.headers),
        timeout=30,
    )
    with v2:
        answered = v2.patch(
            path, json={"chosen_options": ["fast"], "params_input": {"note": "hurry"}}
        )
    assert answered.status_code == 200, answered.text
    assert wait_for(lambda: _run_state(api, "hitl_choice", run_id), timeout=60) == "success"
    assert _states(api, "hitl_choice", run_id) == {
        "choose": "success",
        "fast_path": "success",
        "slow": "skipped",
    }


def test_the_timeout_takes_the_defaults_or_fails_without_them(
    api: Api, running: DagHarness
) -> None:
    run_id = _trigger(api, "hitl_timeout")
    assert wait_for(lambda: _run_state(api, "hitl_timeout", run_id), timeout=60) == "failed"
    assert _states(api, "hitl_timeout", run_id) == {"ask": "success", "ask_no_default": "failed"}
    taken = api.viewer.get(_path("hitl_timeout", run_id, "ask")).json()
    assert taken["chosen_options"] == ["no"] and taken["responded_by"] is None
    never = api.viewer.get(_path("hitl_timeout", run_id, "ask_no_default")).json()
    assert never["response_received"] is False
    # Its task failed: nothing would read a response now.
    late = api.admin.patch(
        _path("hitl_timeout", run_id, "ask_no_default"), json={"chosen_options": ["yes"]}
    )
    assert late.status_code == 409
    assert "no longer waits for a response: it is failed" in late.json()["error"]["message"]
