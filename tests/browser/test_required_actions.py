"""Human in the loop in the web UI: a HITL task waits in the triggerer, the run page and
the header say so, an admin answers it on its task page (options, params from their
schemas, the API's refusals in plain words) or on the Required actions page, and the run
goes on with the answer. And edge labels drawn on the graph's edges, clear of its nodes.

One `tailrace standalone` over DAGs of its own; each test saves screenshots (at 1280 and
420 pixels wide) to be looked at."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tailrace.testing import wait_for
from tailrace.testing._browser import Standalone, log_in

from .conftest import VIEWER, standalone_over

SOURCE = """
from datetime import datetime
from tailrace import ApprovalOperator, EmptyOperator, HITLOperator, Label, Param, dag, task


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def ui_release():
    channels = HITLOperator(
        task_id="channels",
        subject="Which channels get release 4.2?",
        body="The staging checks passed.\\nPick every channel to publish to.",
        options=["stable", "beta", "nightly"],
        defaults=["stable"],
        multiple=True,
        params={
            "note": Param("", type="string", description="for the release notes"),
            "percent": Param(10, type="integer", minimum=1, maximum=100,
                             description="of users first"),
        },
    )

    @task
    def publish(answer):
        return {"channels": answer["chosen_options"], "percent": answer["params_input"]["percent"]}

    publish(channels.output)


ui_release()


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def ui_approval():
    ApprovalOperator(task_id="sign_off", subject="Deploy to production?") >> EmptyOperator(
        task_id="deploy"
    )


ui_approval()


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def ui_labels():
    start = EmptyOperator(task_id="start")
    check = EmptyOperator(task_id="check_quality")
    publish = EmptyOperator(task_id="publish")
    start >> check
    check >> Label("rows look right") >> publish
    check >> Label("too many nulls") >> EmptyOperator(task_id="quarantine")
    check >> EmptyOperator(task_id="audit")
    start >> Label("forced: skip the checks and publish now") >> publish


ui_labels()
"""

NARROW = {"width": 420, "height": 900}
WIDE = {"width": 1280, "height": 800}


@pytest.fixture(scope="module")
def app(
    tmp_path_factory: pytest.TempPathFactory, chromium_executable: str, module_has_machine: None
) -> Iterator[Standalone]:
    with standalone_over(tmp_path_factory, {"ui_hitl.py": textwrap.dedent(SOURCE)}) as running:
        yield running


def _waiting(client: httpx.Client, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
    created = client.post(f"/dags/{dag_id}/runs", json={"run_id": run_id})
    assert created.status_code == 201, created.text

    def asked() -> dict[str, Any] | None:
        found = client.get(f"/hitlDetails/{dag_id}/{run_id}/{task_id}")
        return found.json() if found.status_code == 200 else None

    request: dict[str, Any] = wait_for(asked, timeout=60)
    return request


def _run_state(client: httpx.Client, dag_id: str, run_id: str) -> str | None:
    state = client.get(f"/dags/{dag_id}/runs/{run_id}").json()["state"]
    return state if state in ("success", "failed") else None


def test_an_admin_answers_a_request_on_its_task_page_and_the_run_goes_on_with_it(
    app: Standalone, client: httpx.Client, page: Page, browser: Any, screenshots: Path
) -> None:
    _waiting(client, "ui_release", "release_1", "channels")
    page.goto(f"{app.url}/#/dags/ui_release/runs/release_1")
    notice = page.locator("#hitl-waiting")
    expect(notice).to_contain_text("A task awaits a response")
    expect(page.locator("#nav-actions-count")).to_have_text("1")
    notice.get_by_role("link", name="channels — Which channels get release 4.2?").click()

    card = page.locator("#hitl .hitl")
    expect(card.locator("h2")).to_have_text("Which channels get release 4.2?")
    body = card.locator(".hitl-body")
    expect(body).to_contain_text("The staging checks passed.")
    expect(body).to_contain_text("Pick every channel to publish to.")
    expect(card.locator("[data-option=stable]")).to_be_checked()  # the default
    expect(card.locator("[data-option=beta]")).not_to_be_checked()
    expect(page.locator("#hitl-param-percent")).to_have_value("10")

    # A second tab, opened now, whose live updates stop: it will answer too late.
    stale: Page = browser.new_page()
    log_in(stale, app.url, "admin", app.admin_password)
    stale.route("**/events*", lambda route: route.abort())
    stale.goto(page.url)
    expect(stale.locator("#hitl [data-option=nightly]")).to_be_visible()

    card.locator("[data-option=beta]").check()
    page.fill("#hitl-param-note", "ship it")
    page.fill("#hitl-param-percent", "150")
    page.click("#hitl-submit")
    refusal = card.locator(".error")
    expect(refusal).to_contain_text("params_input 'percent': 150 does not match the schema")
    expect(refusal).to_contain_text("150 is greater than the maximum of 100")
    page.screenshot(path=screenshots / "hitl-task-form.png", full_page=True)
    page.set_viewport_size(NARROW)
    page.screenshot(path=screenshots / "hitl-task-form-narrow.png", full_page=True)
    page.set_viewport_size(WIDE)

    page.fill("#hitl-param-percent", "25")
    page.click("#hitl-submit")
    answer = card.locator(".hitl-response")
    expect(answer.locator(".option-chip")).to_have_text(["stable", "beta"])
    expect(answer.locator(".hitl-by")).to_have_text("admin")
    expect(answer.locator("dd")).to_have_text(["ship it", "25"])
    expect(page.locator("#nav-actions-count")).to_be_hidden()

    stale.locator("#hitl [data-option=nightly]").check()
    stale.click("#hitl-submit")
    late = stale.locator("#hitl .hitl")
    expect(late.locator(".error")).to_contain_text("was already answered: ['stable', 'beta']")
    expect(late.locator(".hitl-response")).to_contain_text("by admin")
    stale.close()

    assert wait_for(lambda: _run_state(client, "ui_release", "release_1"), timeout=60) == "success"
    expect(page.locator("h1 .badge")).to_have_text("success")
    xcom = client.get("/ui/dags/ui_release/runs/release_1/tasks/publish/xcom").json()
    assert xcom[0]["value"] == {"channels": ["stable", "beta"], "percent": 25}
    page.screenshot(path=screenshots / "hitl-task-answered.png", full_page=True)
    page.set_viewport_size(NARROW)
    page.screenshot(path=screenshots / "hitl-task-answered-narrow.png", full_page=True)
    page.set_viewport_size(WIDE)


def test_an_approval_given_on_the_required_actions_page_runs_the_downstream_task(
    app: Standalone, client: httpx.Client, page: Page, screenshots: Path
) -> None:
    _waiting(client, "ui_approval", "approve_1", "sign_off")
    # A viewer sees what waits, and that an admin answers it (the tabs share one session:
    # the admin logs in again after).
    made = app.cli("users", "create", *VIEWER[:1], "--role", "viewer", "--password", VIEWER[1])
    assert made.returncode == 0, made.stderr
    log_in(page, app.url, *VIEWER)
    page.goto(f"{app.url}/#/required-actions")
    asked = page.locator("[data-hitl='ui_approval/approve_1/sign_off']")
    expect(asked).to_contain_text("Waiting for an admin to respond.")
    expect(asked.locator("button")).to_have_count(0)
    log_in(page, app.url, "admin", app.admin_password)

    page.locator("#nav-actions").click()
    expect(page.locator("h1")).to_have_text("Required actions")
    card = page.locator("[data-hitl='ui_approval/approve_1/sign_off']")
    expect(card.locator("h2")).to_have_text("Deploy to production?")
    expect(card.locator("button[data-option]")).to_have_text(["Approve", "Reject"])
    page.screenshot(path=screenshots / "hitl-required-actions.png", full_page=True)
    page.set_viewport_size(NARROW)
    page.screenshot(path=screenshots / "hitl-required-actions-narrow.png", full_page=True)
    page.set_viewport_size(WIDE)

    card.locator("button[data-option=Approve]").click()
    expect(card.locator(".hitl-response .option-chip")).to_have_text(["Approve"])
    expect(card.locator(".hitl-response .hitl-by")).to_have_text("admin")
    row = page.locator("#hitl-answered-table tr[data-task=sign_off]")
    expect(row).to_contain_text("Deploy to production?")
    expect(row).to_contain_text("admin")
    assert wait_for(lambda: _run_state(client, "ui_approval", "approve_1"), timeout=60) == "success"
    states = client.get("/dags/ui_approval/runs/approve_1/task-instances").json()["items"]
    assert {t["task_id"]: t["state"] for t in states} == {
        "sign_off": "success",
        "deploy": "success",
    }
    page.reload()
    expect(page.locator("#hitl-pending .empty")).to_contain_text("Nothing awaits a response")
    expect(page.locator("#nav-actions-count")).to_be_hidden()


def _box(page: Page, locator: Any) -> dict[str, float]:
    box = locator.bounding_box()
    assert box is not None
    return dict(box)


def _overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and b["y"] < a["y"] + a["height"]
    )


def test_the_graph_draws_edge_labels_on_their_edges_clear_of_the_nodes(
    app: Standalone, client: httpx.Client, page: Page, screenshots: Path
) -> None:
    structure = client.get("/ui/dags/ui_labels/structure").json()
    labels = {(e["source_id"], e["target_id"]): e["label"] for e in structure["edges"]}
    assert labels == {
        ("start", "check_quality"): None,
        ("check_quality", "publish"): "rows look right",
        ("check_quality", "quarantine"): "too many nulls",
        ("check_quality", "audit"): None,
        ("start", "publish"): "forced: skip the checks and publish now",
    }
    page.goto(f"{app.url}/#/dags/ui_labels/graph")
    drawn = page.locator("#graph .edge-label")
    expect(drawn).to_have_count(3)
    expect(page.locator("[data-edge='check_quality → quarantine'] text")).to_have_text(
        "too many nulls"
    )
    expect(page.locator("[data-edge='start → publish'] title")).to_have_text(
        "start → publish: forced: skip the checks and publish now"
    )
    nodes = [_box(page, n) for n in page.locator("#graph .node .frame").all()]
    boxes = [_box(page, label.locator("rect")) for label in drawn.all()]
    assert len(nodes) == 5
    for i, label in enumerate(boxes):
        assert not any(_overlap(label, node) for node in nodes), label
        assert not any(_overlap(label, other) for other in boxes[i + 1 :]), label
    page.screenshot(path=screenshots / "graph-edge-labels.png")
