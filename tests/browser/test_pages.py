"""The web UI's pages answer the next question: a run's tries, times and errors, clearing
only what failed, a task's XComs, its rendered templates and a traceback from the user's
frame, task groups drawn as groups, DAG search and tags, readable grid labels, and /docs
with no network.

One `tailrace standalone` over a dags folder holding tailrace.testing's UI demo DAG. Each
test saves a screenshot of the page it checks (``screenshots`` below) to be looked at."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, Route, expect

from tailrace.testing import _ui_demo as demo
from tailrace.testing._browser import Standalone, run_to_end

from .conftest import standalone_over

RUN = "demo_run"


@pytest.fixture(scope="module")
def app(
    tmp_path_factory: pytest.TempPathFactory, chromium_executable: str, module_has_machine: None
) -> Iterator[Standalone]:
    with standalone_over(tmp_path_factory, {"ui_demo.py": demo.SOURCE}) as running:
        yield running


@pytest.fixture(scope="module")
def finished_run(client: httpx.Client) -> str:
    """The demo DAG run to its end: one instance of transform.check fails, load waits on it."""
    assert run_to_end(client, demo.DAG_ID, RUN) == "failed"
    return RUN


def test_the_api_docs_list_the_operations_with_the_network_closed(
    app: Standalone, page: Page, screenshots: Path
) -> None:
    refused: list[str] = []

    def only_this_server(route: Route) -> None:
        if route.request.url.startswith(app.url):
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    page.route("**/*", only_this_server)
    page.goto(f"{app.url}/docs")
    expect(page.locator(".opblock").first).to_be_visible()
    expect(page.locator(".opblock-summary-path", has_text="/api/v1/dags").first).to_be_visible()
    page.screenshot(path=screenshots / "docs.png")
    assert refused == []


def _tries(client: httpx.Client, run_id: str) -> dict[tuple[str, int], int]:
    items = client.get(
        f"/dags/{demo.DAG_ID}/runs/{run_id}/task-instances", params={"limit": 100}
    ).json()["items"]
    return {(ti["task_id"], ti["map_index"]): ti["try_number"] for ti in items}


def test_the_run_page_gives_each_tasks_try_duration_and_first_error(
    app: Standalone, finished_run: str, page: Page, screenshots: Path
) -> None:
    page.goto(f"{app.url}/#/dags/{demo.DAG_ID}/runs/{finished_run}")
    check = page.locator("tr[data-task='transform.check']")
    expect(check.locator(".error-summary")).to_have_text("[3] ValueError: row 3 is not valid")
    expect(check.locator("td.try")).to_have_text("1")
    expect(check).to_contain_text("1 failed")
    extract = page.locator("tr[data-task=extract]")
    expect(extract.locator(".duration")).to_have_text(re.compile(r"^\d+(\.\d)? m?s$"))
    expect(extract.locator(".operator")).to_have_text("@task")
    expect(page.locator("tr[data-task=route] .operator")).to_have_text("@task.branch")
    expect(page.locator("tr[data-task=load] td.try")).to_have_text("\u2013")  # never ran
    expect(page.locator("#clear-failed")).to_have_text("Clear failed tasks (2)")
    page.screenshot(path=screenshots / "run.png")
    # A failed instance's error opens that instance.
    check.locator(".error-summary a").click()
    expect(page.locator("h1")).to_contain_text("transform.check [3]")


def test_clear_failed_tasks_runs_only_the_failed_tasks_again(
    app: Standalone, client: httpx.Client, page: Page
) -> None:
    run_id = "to_clear"
    assert run_to_end(client, demo.DAG_ID, run_id) == "failed"
    before = _tries(client, run_id)
    page.goto(f"{app.url}/#/dags/{demo.DAG_ID}/runs/{run_id}")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#clear-failed")
    # transform.check's failed instance and load (upstream failed) run again, no others.
    expect(page.locator("#clear-notice")).to_contain_text("2 task instances cleared")
    expect(page.locator("h1 .badge")).to_have_text("failed", timeout=60_000)
    expect(page.locator("tr[data-task='transform.check'] td.try")).to_have_text("2")
    after = _tries(client, run_id)
    again = {key for key in after if after[key] != before[key]}
    assert again == {("transform.check", 3)}  # load fails upstream again
    assert after[("extract", -1)] == before[("extract", -1)] == 1
    assert after[("transform.enrich.lookup", -1)] == 1


def test_a_task_instance_shows_its_xcoms_and_a_traceback_from_the_users_frame(
    app: Standalone, finished_run: str, page: Page, screenshots: Path
) -> None:
    base = f"{app.url}/#/dags/{demo.DAG_ID}/runs/{finished_run}/tasks"
    page.goto(f"{base}/transform.check?map_index=3")
    error = page.locator("pre.error-text")
    expect(error).to_contain_text("ValueError: row 3 is not valid")
    lines = error.inner_text().splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[1].strip().startswith('File "') and lines[1].endswith("in check"), lines
    assert "ui_demo.py" in lines[1] and "tailrace" not in error.inner_text()
    page.screenshot(path=screenshots / "task-error.png")

    page.goto(f"{base}/extract")
    expect(page.locator(".facts")).to_contain_text("@task")
    page.click("#tab-xcom")
    row = page.locator("#xcom-table tr[data-key=return_value]")
    expect(row).to_contain_text("0,")
    expect(row.locator("pre")).to_have_text(re.compile(r"\[\s*0,\s*1,\s*2,\s*3,\s*4,\s*5\s*\]"))
    expect(page.locator("#log")).to_be_hidden()
    page.screenshot(path=screenshots / "task-xcom.png")
    page.click("#tab-log")
    expect(page.locator("#log")).to_contain_text("Running ui_demo.extract")


def test_a_task_instance_shows_its_templated_fields_as_rendered_for_the_try(
    app: Standalone, finished_run: str, page: Page, screenshots: Path
) -> None:
    base = f"{app.url}/#/dags/{demo.DAG_ID}/runs/{finished_run}/tasks"
    page.goto(f"{base}/transform.enrich.convert")
    page.click("#tab-rendered")
    # convert(lookup()): its op_args as rendered, the upstream XCom pulled in.
    row = page.locator("#rendered-table tr[data-field=op_args]")
    expect(row.locator("pre")).to_have_text('[{"EUR":1.0,"USD":1.08}]')
    expect(page.locator("#rendered")).to_contain_text("as rendered for try 1")
    expect(page.locator("#log")).to_be_hidden()
    page.screenshot(path=screenshots / "task-rendered.png")
    # A task that never ran has nothing rendered, and says why.
    page.goto(f"{base}/load")
    page.click("#tab-rendered")
    expect(page.locator("#rendered")).to_contain_text("has not started")


def _box(page: Page, selector: str) -> dict[str, float]:
    box = page.locator(selector).bounding_box()
    assert box is not None, selector
    return box


def _inside(inner: dict[str, float], outer: dict[str, float]) -> bool:
    return (
        outer["x"] <= inner["x"]
        and outer["y"] <= inner["y"]
        and inner["x"] + inner["width"] <= outer["x"] + outer["width"]
        and inner["y"] + inner["height"] <= outer["y"] + outer["height"]
    )


def test_the_graph_draws_task_groups_around_their_tasks_and_names_operators_as_written(
    app: Standalone, finished_run: str, page: Page, screenshots: Path
) -> None:
    page.goto(f"{app.url}/#/dags/{demo.DAG_ID}/graph")
    expect(page.locator("#graph .node.st-success").first).to_be_visible()
    outer = _box(page, "[data-group=transform] .group-box")
    inner = _box(page, "[data-group='transform.enrich'] .group-box")
    assert _inside(inner, outer)
    for task_id in ("transform.check", "transform.enrich.lookup", "transform.enrich.convert"):
        assert _inside(_box(page, f".node[data-task='{task_id}']"), outer), task_id
    for task_id in ("transform.enrich.lookup", "transform.enrich.convert"):
        assert _inside(_box(page, f".node[data-task='{task_id}']"), inner), task_id
    for task_id in ("extract", "route", "load", "transform.check"):
        assert not _inside(_box(page, f".node[data-task='{task_id}']"), inner), task_id
    for task_id in ("extract", "route", "load"):
        assert not _inside(_box(page, f".node[data-task='{task_id}']"), outer), task_id
    expect(page.locator("[data-group='transform.enrich'] .group-label")).to_have_text("▣ enrich")
    expect(page.locator(".node[data-task=route] .sub")).to_have_text("@task.branch")
    assert "DecoratedOperator" not in page.content()
    page.screenshot(path=screenshots / "graph.png")


def test_the_dag_list_filters_by_text_and_tag(
    app: Standalone, client: httpx.Client, page: Page, screenshots: Path
) -> None:
    expect(page.locator("tr[data-dag=ui_demo]")).to_be_visible()
    page.fill("#dag-search", "DEMO")
    expect(page.locator("tr[data-dag]")).to_have_count(1)
    page.fill("#dag-search", "no such dag")
    expect(page.locator("tr[data-dag]")).to_have_count(0)
    expect(page.locator(".empty")).to_contain_text("No DAG matches")
    page.fill("#dag-search", "")
    page.click("#tag-filter [data-tag=ui]")
    expect(page.locator("#tag-filter [data-tag=ui]")).to_have_class(re.compile("on"))
    expect(page.locator("tr[data-dag]")).to_have_count(1)
    assert "tag=ui" in page.url  # a filtered list can be bookmarked
    page.screenshot(path=screenshots / "dags.png")
    page.reload()
    expect(page.locator("#tag-filter [data-tag=ui]")).to_have_class(re.compile("on"))


def test_a_live_snapshot_after_leaving_the_dag_list_keeps_the_new_address(
    app: Standalone, client: httpx.Client, page: Page
) -> None:
    """The trigger dialog sets a run's hash; a DAG list snapshot drawn before that hashchange
    is handled must not write the list's own address back (CI saw the run page never open)."""
    switch = page.locator("input[data-pause=ui_demo]")
    paused = not switch.is_checked()
    # The address changes with no hashchange yet: the moment between the two.
    page.evaluate("history.pushState(null, '', '#/pools')")
    assert client.patch("/dags/ui_demo", json={"is_paused": not paused}).status_code == 200
    expect(switch).to_be_checked(checked=paused)  # the snapshot of the change was drawn
    assert page.evaluate("location.hash") == "#/pools"
    client.patch("/dags/ui_demo", json={"is_paused": paused})


def test_the_grid_has_labels_that_fit_and_task_groups_that_fold(
    app: Standalone, finished_run: str, page: Page, screenshots: Path
) -> None:
    page.goto(f"{app.url}/#/dags/{demo.DAG_ID}/grid")
    label = page.locator("#grid .run-date").first
    expect(label).to_be_visible()
    column = _box(page, "#grid th.run-col >> nth=0")
    text = label.bounding_box()
    assert text is not None
    # Written upwards, a label is no wider than its column, so neighbours cannot overlap.
    assert text["width"] <= column["width"], (text, column)
    # Task groups are rows of their own, most urgent state first, and fold away.
    transform = page.locator("#grid tr[data-group=transform]")
    expect(transform.locator(".cell.st-failed").first).to_be_visible()
    enrich = page.locator("#grid tr[data-group='transform.enrich']")
    expect(enrich.locator(".cell.st-success").first).to_be_visible()
    expect(enrich.locator(".cell:not(.st-success)")).to_have_count(0)
    expect(page.locator("#grid tr[data-task='transform.check'] th")).to_have_text("checkmapped")
    page.screenshot(path=screenshots / "grid.png")
    transform.locator("button.fold").click()
    expect(page.locator("#grid tr[data-task='transform.check']")).to_have_count(0)
    expect(page.locator("#grid tr[data-group='transform.enrich']")).to_have_count(0)
    expect(page.locator("#grid tr[data-task=load]")).to_be_visible()
    transform.locator("button.fold").click()
    expect(page.locator("#grid tr[data-task='transform.check']")).to_be_visible()


def test_the_pools_page_shows_each_pools_slots_and_an_admin_sets_one(
    app: Standalone, client: httpx.Client, page: Page, screenshots: Path
) -> None:
    page.goto(f"{app.url}/#/pools")
    default = page.locator("tr[data-pool=default_pool]")
    expect(default).to_contain_text("Default pool")
    expect(default.locator("button")).to_have_count(0)  # default_pool cannot be deleted
    page.fill("#pool-name", "db_pool")
    page.fill("#pool-slots", "4")
    page.fill("#pool-description", "The orders database: four connections")
    page.click("#pool-form button[type=submit]")
    row = page.locator("tr[data-pool=db_pool]")
    expect(row).to_contain_text("0 of 4 slots in use")
    assert client.get("/pools/db_pool").json()["slots"] == 4
    page.screenshot(path=screenshots / "pools.png")
    row.locator("button[data-delete=db_pool]").click()
    expect(row).to_have_count(0)
    assert client.get("/pools/db_pool").status_code == 404


def test_the_variables_page_lists_masks_adds_and_deletes(
    app: Standalone, client: httpx.Client, page: Page, screenshots: Path
) -> None:
    assert client.post("/variables", json={"key": "region", "value": "eu-west-1"}).is_success
    assert client.post(
        "/variables", json={"key": "api_token", "value": "tk-0123456789", "description": "vendor"}
    ).is_success
    page.goto(f"{app.url}/#/variables")
    expect(page.locator("tr[data-key=region]")).to_contain_text("eu-west-1")
    expect(page.locator("tr[data-key=api_token]")).to_contain_text("***")
    assert "tk-0123456789" not in page.content()
    page.fill("#variable-key", "batch_size")
    page.fill("#variable-value", '{"rows": 500}')
    page.fill("#variable-description", "rows per insert")
    page.click("#variable-form button[type=submit]")
    expect(page.locator("tr[data-key=batch_size]")).to_contain_text('{"rows": 500}')
    page.fill("#variable-key", "region")
    page.fill("#variable-value", "us-east-1")
    page.click("#variable-form button[type=submit]")
    expect(page.locator("tr[data-key=region]")).to_contain_text("us-east-1")
    page.screenshot(path=screenshots / "variables.png")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("tr[data-key=region] button")
    expect(page.locator("tr[data-key=region]")).to_have_count(0)
    expect(page.locator("#variable-message")).to_contain_text("Variable region deleted")
    assert client.get("/variables/region").status_code == 404
