"""The web UI's read routes and live streams, over real HTTP, and its cookie sessions."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from sqlalchemy import Engine, update

from tailrace.db.models import TaskInstance
from tailrace.testing import DagHarness

from .conftest import PASSWORDS, Api


def _only_run_id(api: Api, dag_id: str) -> str:
    runs = api.viewer.get(f"/dags/{dag_id}/runs").json()["items"]
    assert len(runs) == 1
    return str(runs[0]["run_id"])


def _events(response: httpx.Response) -> Iterator[tuple[str, str, str | None]]:
    """(event, data, id) of each Server-Sent Event, as it arrives."""
    event, data, event_id = "message", [], None
    for line in response.iter_lines():
        if line == "":
            if data:
                yield event, "\n".join(data), event_id
            event, data = "message", []
        elif line.startswith("event: "):
            event = line.removeprefix("event: ")
        elif line.startswith("data: "):
            data.append(line.removeprefix("data: "))
        elif line.startswith("id: "):
            event_id = line.removeprefix("id: ")


@contextmanager
def _live(client: httpx.Client, path: str, **kwargs: Any) -> Iterator[Iterator[Any]]:
    """The snapshots a live route sends, decoded, read one at a time."""
    with client.stream("GET", path, **kwargs) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        yield (json.loads(data) for event, data, _ in _events(response) if event == "snapshot")


def test_the_grid_counts_a_mapped_tasks_instances_per_state(
    api: Api, harness: DagHarness, engine: Engine
) -> None:
    harness.parse()
    assert harness.trigger_and_run("api_mapped")["state"] == "success"
    run_id = _only_run_id(api, "api_mapped")
    # A mix of states, as a run in flight would have.
    with engine.begin() as conn:
        for low, high, state in ((0, 1, "failed"), (2, 2, "running"), (3, 3, None)):
            conn.execute(
                update(TaskInstance)
                .where(
                    TaskInstance.task_id == "double",
                    TaskInstance.map_index.between(low, high),
                )
                .values(state=state)
            )
    r = api.viewer.get("/ui/dags/api_mapped/grid")
    assert r.status_code == 200, r.text
    grid = r.json()
    assert grid["task_ids"] == ["numbers", "double"]
    assert [run["run_id"] for run in grid["items"]] == [run_id]
    cells = grid["items"][0]["tasks"]
    assert cells["numbers"] == {
        "task_id": "numbers",
        "state": "success",
        "counts": {"success": 1},
        "total": 1,
    }
    assert cells["double"]["counts"] == {"failed": 2, "running": 1, "none": 1, "success": 3}
    assert (cells["double"]["state"], cells["double"]["total"]) == ("failed", 7)
    run = api.viewer.get(f"/ui/dags/api_mapped/runs/{run_id}").json()
    assert [(t["task_id"], t["total"]) for t in run["tasks"]] == [("numbers", 1), ("double", 7)]
    assert run["run"]["task_instance_states"] == {
        "success": 4,
        "failed": 2,
        "running": 1,
        "none": 1,
    }


def test_the_run_view_gives_each_task_its_try_times_and_first_error(
    api: Api, harness: DagHarness, engine: Engine
) -> None:
    harness.parse()
    assert harness.trigger_and_run("api_mapped")["state"] == "success"
    run_id = _only_run_id(api, "api_mapped")
    traceback = 'Traceback (most recent call last):\n  File "d.py", line 9\nValueError: odd {}\n'
    with engine.begin() as conn:
        for index in (5, 3):
            conn.execute(
                update(TaskInstance)
                .where(TaskInstance.task_id == "double", TaskInstance.map_index == index)
                .values(state="failed", error=traceback.format(index), try_number=2)
            )
        conn.execute(
            update(TaskInstance)
            .where(TaskInstance.task_id == "double", TaskInstance.map_index == 6)
            .values(state="running", end_date=None)
        )
    tasks = {
        t["task_id"]: t
        for t in api.viewer.get(f"/ui/dags/api_mapped/runs/{run_id}").json()["tasks"]
    }
    numbers, double = tasks["numbers"], tasks["double"]
    assert (numbers["try_number"], numbers["error"], numbers["error_map_index"]) == (1, None, None)
    assert numbers["duration"] is not None and numbers["duration"] >= 0
    assert numbers["end_date"] >= numbers["start_date"]
    # The first failed instance by map index, its exception line; no end while one runs.
    assert (double["error"], double["error_map_index"]) == ("ValueError: odd 3", 3)
    assert (double["try_number"], double["end_date"], double["duration"]) == (2, None, None)
    assert double["counts"] == {"success": 4, "failed": 2, "running": 1}


def test_a_task_instances_xcoms_by_key(api: Api, harness: DagHarness) -> None:
    harness.parse()
    assert harness.trigger_and_run("api_basic")["state"] == "success"
    run_id = _only_run_id(api, "api_basic")
    base = f"/ui/dags/api_basic/runs/{run_id}/tasks"
    [one] = api.viewer.get(f"{base}/one/xcom").json()
    assert (one["key"], one["value"], one["truncated"], one["map_index"]) == (
        "return_value", 1, False, -1
    )  # fmt: skip
    assert [x["value"] for x in api.viewer.get(f"{base}/two/xcom").json()] == [2]
    assert api.viewer.get(f"{base}/nope/xcom").status_code == 404
    assert api.viewer.get(f"{base}/one/xcom", params={"map_index": 3}).status_code == 404


def test_a_tries_rendered_template_fields(api: Api, harness: DagHarness) -> None:
    harness.parse()
    assert harness.trigger_and_run("api_basic")["state"] == "success"
    run_id = _only_run_id(api, "api_basic")
    base = f"/ui/dags/api_basic/runs/{run_id}/tasks"
    rendered = api.viewer.get(f"{base}/one/rendered").json()
    assert (rendered["try_number"], rendered["rendered"]) == (1, True)
    assert [f["field"] for f in rendered["fields"]] == ["templates_dict", "op_args", "op_kwargs"]
    assert api.viewer.get(f"{base}/one/rendered", params={"try_number": 2}).status_code == 404
    assert api.viewer.get(f"{base}/nope/rendered").status_code == 404


def test_the_api_docs_page_loads_swagger_ui_from_this_server(api: Api) -> None:
    root = api.url.removesuffix("/api/v1")
    page = httpx.get(f"{root}/docs")
    assert page.status_code == 200
    assert "/docs/assets/swagger-ui-bundle.js" in page.text
    assert "/api/v1/openapi.json" in page.text
    assert "https://" not in page.text  # nothing from a CDN
    script = httpx.get(f"{root}/docs/assets/swagger-ui-bundle.js")
    assert script.status_code == 200 and "SwaggerUIBundle" in script.text
    assert httpx.get(f"{root}/docs/assets/swagger-ui.css").status_code == 200


def test_grid_pages_runs_newest_first_with_a_cursor(api: Api, harness: DagHarness) -> None:
    harness.parse()
    for run_id in ("a", "b", "c"):
        assert api.admin.post("/dags/api_basic/runs", json={"run_id": run_id}).status_code == 201
    first = api.viewer.get("/ui/dags/api_basic/grid", params={"limit": 2}).json()
    assert [r["run_id"] for r in first["items"]] == ["c", "b"]
    assert first["items"][0]["tasks"]["one"]["state"] is None
    second = api.viewer.get(
        "/ui/dags/api_basic/grid", params={"limit": 2, "cursor": first["next_cursor"]}
    ).json()
    assert ([r["run_id"] for r in second["items"]], second["next_cursor"]) == (["a"], None)
    other = api.viewer.get("/ui/dags/api_basic/grid", params={"cursor": "WyJkYWdzIiwieCJd"})
    assert other.status_code == 400
    assert api.viewer.get("/ui/dags/nope/grid").status_code == 404


def test_structure_gives_edges_a_layered_layout_mapping_and_params(
    api: Api, harness: DagHarness
) -> None:
    harness.parse()
    basic = api.viewer.get("/ui/dags/api_basic/structure").json()
    tasks = {t["task_id"]: t for t in basic["tasks"]}
    assert [t["task_id"] for t in basic["tasks"]] == ["one", "two"]
    assert (tasks["one"]["downstream"], tasks["two"]["upstream"]) == (["two"], ["one"])
    assert [(t["layer"], t["row"]) for t in basic["tasks"]] == [(0, 0), (1, 0)]
    assert basic["edges"] == [{"source_id": "one", "target_id": "two", "label": None}]
    assert basic["params"]["greeting"]["default"] == "hello"
    mapped = api.viewer.get("/ui/dags/api_mapped/structure").json()
    assert [t["mapped"] for t in mapped["tasks"]] == [None, "expand"]
    stream = api.viewer.get("/ui/dags/api_stream/structure").json()
    assert stream["tasks"][0]["starts_in_triggerer"] is True
    assert api.viewer.get("/ui/dags/nope/structure").status_code == 404


def test_the_run_view_shows_a_streams_figures_and_latest_items(
    api: Api, harness: DagHarness
) -> None:
    harness.parse()
    assert harness.trigger_and_run("api_stream")["state"] == "success"
    run_id = _only_run_id(api, "api_stream")
    view = api.viewer.get(f"/ui/dags/api_stream/runs/{run_id}").json()
    [stream] = view["streams"]
    assert (stream["task_id"], stream["produced"], stream["items"]) == ("fetch", 12, 12)
    assert stream["paused_by_backpressure"] is False
    assert [i["index"] for i in stream["latest_items"]] == [7, 8, 9, 10, 11]
    assert stream["latest_items"][-1]["value"] == {"page": 11}
    assert api.viewer.get("/ui/dags/api_stream/runs/nope").status_code == 404


def test_the_dag_list_shows_recent_runs_newest_first(api: Api, harness: DagHarness) -> None:
    harness.parse()
    for run_id in ("r1", "r2"):
        api.admin.post("/dags/api_basic/runs", json={"run_id": run_id})
    page = api.viewer.get("/ui/dags").json()
    dags = {d["dag_id"]: d for d in page["items"]}
    assert [r["run_id"] for r in dags["api_basic"]["recent_runs"]] == ["r2", "r1"]
    assert dags["api_mapped"]["recent_runs"] == []


def test_a_live_grid_sends_a_new_snapshot_when_a_run_is_triggered(
    api: Api, harness: DagHarness
) -> None:
    harness.parse()
    with _live(api.viewer, "/ui/dags/api_basic/grid/events") as snapshots:
        assert next(snapshots)["items"] == []
        api.admin.post("/dags/api_basic/runs", json={"run_id": "live"})
        assert [r["run_id"] for r in next(snapshots)["items"]] == ["live"]


def test_a_live_run_follows_its_states_to_the_end(api: Api, harness: DagHarness) -> None:
    harness.parse()
    api.admin.post("/dags/api_basic/runs", json={"run_id": "watched"})
    with _live(api.viewer, "/ui/dags/api_basic/runs/watched/events") as live:
        seen = [next(live)["run"]["state"]]
        with harness.running():
            for snapshot in live:
                seen.append(snapshot["run"]["state"])
                if snapshot["run"]["state"] == "success":
                    break
    assert seen[0] == "queued" and seen[-1] == "success"


def test_a_logs_live_tail_sends_its_text_then_ends_and_resumes_from_an_offset(
    api: Api, harness: DagHarness
) -> None:
    harness.parse()
    pk = harness.trigger("api_basic", {"greeting": "hej"})
    harness.run(pk)
    run_id = _only_run_id(api, "api_basic")
    full = harness.log(pk, "one")
    path = f"/dags/api_basic/runs/{run_id}/task-instances/one/logs/1/events"
    with api.viewer.stream("GET", path) as response:
        events = list(_events(response))
    assert [e for e, _, _ in events][-1] == "end"
    text = "".join(json.loads(data) for event, data, _ in events if event == "log")
    assert text == full and "greeting is hej" in text
    assert events[-1][2] == str(len(full.encode()))
    with api.viewer.stream("GET", path, headers={"Last-Event-ID": "10"}) as response:
        rest = "".join(json.loads(d) for e, d, _ in _events(response) if e == "log")
    assert rest == full.encode()[10:].decode()
    assert api.viewer.get(path.replace("/logs/1/", "/logs/2/")).status_code == 404


@contextmanager
def _session(api: Api, username: str) -> Iterator[httpx.Client]:
    """A client holding a web UI session (the cookie), like a logged-in browser."""
    with httpx.Client(base_url=api.url, timeout=30) as client:
        r = client.post(
            "/auth/session", json={"username": username, "password": PASSWORDS[username]}
        )
        assert r.status_code == 201, r.text
        yield client


def test_a_session_cookie_is_httponly_strict_and_authenticates_reads_and_streams(
    api: Api, harness: DagHarness
) -> None:
    harness.parse()
    wrong = api.anonymous.post("/auth/session", json={"username": "ada", "password": "no"})
    assert wrong.status_code == 401 and "set-cookie" not in wrong.headers
    with _session(api, "vic") as browser:
        login = browser.post(
            "/auth/session", json={"username": "vic", "password": PASSWORDS["vic"]}
        )
        cookie = browser.cookies["tailrace_session"]
        flags = {part.strip().lower() for part in login.headers["set-cookie"].split(";")}
        assert {"httponly", "samesite=strict", "path=/"} <= flags
        assert login.json()["role"] == "viewer"
        assert browser.get("/auth/me").json() == {"username": "vic", "role": "viewer"}
        with _live(browser, "/ui/dags/events") as live:
            assert "api_basic" in [d["dag_id"] for d in next(live)["items"]]
        assert browser.delete("/auth/session").status_code == 204
        assert "tailrace_session" not in browser.cookies
        # The token the cookie held is revoked, not only forgotten by this browser.
        revoked = api.anonymous.get("/dags", headers={"Cookie": f"tailrace_session={cookie}"})
        assert revoked.status_code == 401
    assert api.anonymous.get("/ui/dags/events").status_code == 401


def test_cookie_authenticated_changes_need_the_csrf_header_and_an_admin(
    api: Api, harness: DagHarness
) -> None:
    harness.parse()
    csrf = {"X-Tailrace-CSRF": "1"}
    with _session(api, "ada") as admin, _session(api, "vic") as viewer:
        refused = admin.post("/dags/api_basic/runs", json={"run_id": "x"})
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "csrf"
        assert admin.patch("/dags/api_basic", json={"is_paused": True}).status_code == 403
        assert api.viewer.get("/dags/api_basic/runs").json()["items"] == []
        created = admin.post("/dags/api_basic/runs", json={"run_id": "x"}, headers=csrf)
        assert created.status_code == 201, created.text
        forbidden = viewer.post("/dags/api_basic/runs", json={"run_id": "y"}, headers=csrf)
        assert forbidden.status_code == 403
        assert forbidden.json()["error"]["code"] == "forbidden"
    # A bearer token is no cookie: scripts need no CSRF header.
    assert api.admin.post("/dags/api_basic/runs", json={"run_id": "z"}).status_code == 201
