"""Runs made through the API and executed by the real scheduler, workers and triggerer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import insert

from tailrace.clock import utcnow
from tailrace.db.models import DeadLetter
from tailrace.serialization import dumps
from tailrace.testing import DagHarness, wait_for

from .conftest import Api


def _wait_finished(api: Api, dag_id: str, run_id: str) -> dict[str, Any]:
    def finished() -> dict[str, Any] | None:
        run: dict[str, Any] = api.viewer.get(f"/dags/{dag_id}/runs/{run_id}").json()
        return run if run["state"] in ("success", "failed") else None

    return wait_for(finished, timeout=60)


def _tis(api: Api, dag_id: str, run_id: str, **params: Any) -> list[dict[str, Any]]:
    r = api.viewer.get(f"/dags/{dag_id}/runs/{run_id}/task-instances", params=params)
    assert r.status_code == 200, r.text
    items: list[dict[str, Any]] = r.json()["items"]
    return items


def test_a_run_triggered_with_conf_runs_and_its_tries_and_logs_are_readable(
    api: Api, harness: DagHarness
) -> None:
    with harness.running():
        r = api.admin.post("/dags/api_basic/runs", json={"conf": {"greeting": "bonjour"}})
        assert r.status_code == 201, r.text
        run = r.json()
        assert (run["state"], run["run_type"], run["conf"]) == (
            "queued",
            "manual",
            {"greeting": "bonjour"},
        )
        done = _wait_finished(api, "api_basic", run["run_id"])
    assert done["state"] == "success"
    assert done["task_instance_states"] == {"success": 2}
    assert [
        (t["task_id"], t["state"], t["try_number"]) for t in _tis(api, "api_basic", run["run_id"])
    ] == [
        ("one", "success", 1),
        ("two", "success", 1),
    ]
    base = f"/dags/api_basic/runs/{run['run_id']}/task-instances/one"
    detail = api.viewer.get(base).json()
    assert [(t["try_number"], t["state"]) for t in detail["tries"]] == [(1, "success")]
    harness.log(_pk(harness, run["run_id"]), "one")  # waits until the file is complete
    log = api.viewer.get(f"{base}/logs/1")
    assert log.status_code == 200
    assert log.headers["content-type"].startswith("text/plain")
    assert "greeting is bonjour" in log.text
    missing = api.viewer.get(f"{base}/logs/2")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "log_not_found"
    dags = {d["dag_id"]: d for d in api.viewer.get("/dags").json()["items"]}
    assert dags["api_basic"]["latest_run_state"] == "success"


def _pk(harness: DagHarness, run_id: str) -> int:
    from sqlalchemy import select

    from tailrace.db.models import DagRun

    with harness.engine.connect() as conn:
        pk = conn.scalar(select(DagRun.id).where(DagRun.run_id == run_id))
    assert pk is not None
    return pk


def test_bad_conf_unknown_dag_and_a_taken_run_id_are_refused_clearly(
    api: Api, harness: DagHarness
) -> None:
    bad = api.admin.post("/dags/api_basic/runs", json={"conf": {"greeting": 5}})
    assert bad.status_code == 422
    assert bad.json()["error"]["code"] == "invalid_conf"
    assert "greeting" in bad.json()["error"]["message"]
    unknown = api.admin.post("/dags/nope/runs", json={})
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "dag_not_found"
    assert api.admin.post("/dags/api_basic/runs", json={"run_id": "mine"}).status_code == 201
    taken = api.admin.post("/dags/api_basic/runs", json={"run_id": "mine"})
    assert taken.status_code == 409
    assert taken.json()["error"]["code"] == "run_exists"


def test_clear_runs_a_task_again_and_mark_sets_a_state(api: Api, harness: DagHarness) -> None:
    with harness.running():
        run_id = api.admin.post("/dags/api_basic/runs", json={}).json()["run_id"]
        _wait_finished(api, "api_basic", run_id)
        base = f"/dags/api_basic/runs/{run_id}"
        cleared = api.admin.post(f"{base}/task-instances/two/clear")
        assert cleared.json() == {"cleared": 1}
        _wait_finished(api, "api_basic", run_id)
        two = api.viewer.get(f"{base}/task-instances/two").json()
        assert (two["state"], two["try_number"]) == ("success", 2)
        assert [t["try_number"] for t in two["tries"]] == [1, 2]
        assert api.admin.post(f"{base}/clear", json={"task_ids": ["one", "two"]}).json() == {
            "cleared": 2
        }
        _wait_finished(api, "api_basic", run_id)
    marked = api.admin.patch(f"{base}/task-instances/one", json={"state": "failed"})
    assert marked.json() == {"marked": 1}
    assert api.viewer.get(f"{base}/task-instances/one").json()["state"] == "failed"
    # only_failed: the one failed instance, not the successful one beside it.
    only = api.admin.post(f"{base}/clear", json={"task_ids": ["one", "two"], "only_failed": True})
    assert only.json() == {"cleared": 1}
    assert api.viewer.get(f"{base}/task-instances/one").json()["state"] is None
    assert api.viewer.get(f"{base}/task-instances/two").json()["state"] == "success"
    marked = api.admin.patch(f"{base}/task-instances/one", json={"state": "failed"})
    assert (
        api.admin.patch(f"{base}/task-instances/nope", json={"state": "failed"}).status_code == 404
    )
    invalid = api.admin.patch(f"{base}/task-instances/one", json={"state": "running"})
    assert invalid.status_code == 422


def test_task_instances_filter_by_state_task_and_map_index_range(
    api: Api, harness: DagHarness
) -> None:
    with harness.running():
        run_id = api.admin.post("/dags/api_mapped/runs", json={}).json()["run_id"]
        assert _wait_finished(api, "api_mapped", run_id)["state"] == "success"
    assert len(_tis(api, "api_mapped", run_id)) == 8
    picked = _tis(api, "api_mapped", run_id, task_id="double", map_index_gte=2, map_index_lte=4)
    assert [t["map_index"] for t in picked] == [2, 3, 4]
    assert {t["state"] for t in _tis(api, "api_mapped", run_id, state="success")} == {"success"}
    assert _tis(api, "api_mapped", run_id, state=["failed", "none"]) == []
    one = api.viewer.get(
        f"/dags/api_mapped/runs/{run_id}/task-instances/double", params={"map_index": 6}
    ).json()
    assert (one["map_index"], one["state"]) == (6, "success")


def test_pause_and_unpause_and_import_errors(api: Api, harness: DagHarness) -> None:
    assert api.admin.patch("/dags/api_basic", json={"is_paused": True}).json()["paused"] is True
    assert api.viewer.get("/dags/api_basic").json()["paused"] is True
    assert api.admin.patch("/dags/api_basic", json={"is_paused": False}).json()["paused"] is False
    assert api.admin.patch("/dags/nope", json={"is_paused": True}).status_code == 404
    errors = api.viewer.get("/import-errors").json()["items"]
    assert [e["filename"].rsplit("/", 1)[1] for e in errors] == ["api_broken.py"]
    assert "broken on purpose" in errors[0]["message"]


def test_a_stream_its_trigger_and_the_triggerer_lines_in_a_followed_log(
    api: Api, harness: DagHarness
) -> None:
    with harness.running():
        run_id = api.admin.post("/dags/api_stream/runs", json={}).json()["run_id"]
        base = f"/dags/api_stream/runs/{run_id}/task-instances/fetch"
        wait_for(lambda: api.viewer.get(base).json()["try_number"] >= 1)
        # Follow the try's log from the start: the response ends once the try has ended.
        with api.viewer.stream("GET", f"{base}/logs/1", params={"follow": "true"}) as r:
            assert r.status_code == 200
            followed = "".join(r.iter_text())
        assert _wait_finished(api, "api_stream", run_id)["state"] == "success"
    assert all(f"trigger fetched page {n}" in followed for n in range(12)), followed
    assert "{triggerer " in followed
    streams = api.viewer.get("/streams", params={"dag_id": "api_stream"}).json()["items"]
    assert len(streams) == 1
    stream = streams[0]
    assert (stream["produced"], stream["acknowledged"], stream["items"], stream["closed"]) == (
        12,
        12,
        12,
        True,
    )
    ti_id = stream["task_instance_id"]
    assert api.viewer.get(f"/streams/{ti_id}").json() == stream
    pages, cursor = [], None
    while True:
        params = {"limit": 5, **({"cursor": cursor} if cursor else {})}
        body = api.viewer.get(f"/streams/{ti_id}/items", params=params).json()
        pages.append([(i["index"], i["value"]["page"]) for i in body["items"]])
        if (cursor := body["next_cursor"]) is None:
            break
    assert [len(p) for p in pages] == [5, 5, 2]
    assert [item for p in pages for item in p] == [(n, n) for n in range(12)]
    triggers = api.viewer.get("/triggers", params={"include_completed": True}).json()["items"]
    assert [(t["dag_id"], t["task_id"], t["events"], t["completed"]) for t in triggers] == [
        ("api_stream", "fetch", 12, True)
    ]
    assert triggers[0]["triggerer"] is not None and ":" in triggers[0]["triggerer"]
    assert api.viewer.get("/triggers").json()["items"] == []


def test_dead_letters_are_listed_with_their_payload_reason_and_message_id(
    api: Api, harness: DagHarness
) -> None:
    with harness.running():
        run_id = api.admin.post("/dags/api_stream/runs", json={}).json()["run_id"]
        assert _wait_finished(api, "api_stream", run_id)["state"] == "success"
    ti = api.viewer.get(f"/dags/api_stream/runs/{run_id}/task-instances/fetch").json()
    [stream] = api.viewer.get("/streams", params={"dag_id": "api_stream"}).json()["items"]
    now = utcnow()
    with harness.engine.begin() as conn:
        conn.execute(
            insert(DeadLetter),
            [
                {
                    "task_instance_id": stream["task_instance_id"],
                    "dag_id": "api_stream",
                    "run_id": run_id,
                    "task_id": "fetch",
                    "map_index": -1,
                    "try_number": ti["try_number"],
                    "trigger_id": 1,
                    "sequence_index": n,
                    "dedup_key": f"msg-{n}",
                    "payload": dumps({"page": n, "name": "Zoë"}),
                    "reason": "Traceback …\nValueError: bad page",
                    "created_at": now,
                }
                for n in (3, 4, 5)
            ],
        )
    first = api.viewer.get("/streams/dead-letters", params={"limit": 2}).json()
    rest = api.viewer.get(
        "/streams/dead-letters", params={"limit": 2, "cursor": first["next_cursor"]}
    ).json()
    letters = first["items"] + rest["items"]
    assert rest["next_cursor"] is None
    assert [(d["sequence_index"], d["dedup_key"], d["payload"]) for d in letters] == [
        (n, f"msg-{n}", {"page": n, "name": "Zoë"}) for n in (3, 4, 5)
    ]
    assert {(d["dag_id"], d["run_id"], d["task_id"]) for d in letters} == {
        ("api_stream", run_id, "fetch")
    }
    assert letters[0]["reason"].endswith("ValueError: bad page")
    other = api.viewer.get("/streams/dead-letters", params={"dag_id": "api_basic"}).json()
    assert other == {"items": [], "next_cursor": None}


def test_a_followed_log_streams_lines_while_the_try_runs_and_ends_with_it(
    api: Api, harness: DagHarness, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    with harness.running():
        run_id = api.admin.post("/dags/api_live/runs", json={"conf": {"gate": str(gate)}}).json()[
            "run_id"
        ]
        base = f"/dags/api_live/runs/{run_id}/task-instances/gated"
        wait_for(lambda: api.viewer.get(base).json()["state"] == "running")
        with api.viewer.stream("GET", f"{base}/logs/1", params={"follow": "true"}) as r:
            lines = r.iter_lines()
            before = []
            for line in lines:
                before.append(line)
                if "before the gate" in line:
                    break
            # The try is still running, blocked on the gate: this line came live.
            assert api.viewer.get(base).json()["state"] == "running"
            gate.touch()
            after = list(lines)  # ends when the try has ended
        assert _wait_finished(api, "api_live", run_id)["state"] == "success"
    assert not any("after the gate" in line for line in before)
    assert any("after the gate" in line for line in after), after
    assert any("Task finished" in line for line in after), after


def test_the_api_is_served_with_an_openapi_document_and_a_root_page(api: Api) -> None:
    root = api.url.removesuffix("/api/v1")
    doc = httpx.get(f"{api.url}/openapi.json").json()
    assert doc["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert "/api/v1/dags/{dag_id}/runs" in doc["paths"]
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    assert 'href="docs"' in httpx.get(f"{root}/").text
    assert httpx.get(f"{root}/docs").status_code == 200


def test_the_log_of_a_run_with_a_249_character_run_id_is_served(
    api: Api, harness: DagHarness
) -> None:
    run_id = "r" * 249
    with harness.running():
        r = api.admin.post("/dags/api_basic/runs", json={"run_id": run_id})
        assert r.status_code == 201, r.text
        assert _wait_finished(api, "api_basic", run_id)["state"] == "success"
    harness.log(_pk(harness, run_id), "one")  # waits until the file is complete
    log = api.viewer.get(f"/dags/api_basic/runs/{run_id}/task-instances/one/logs/1")
    assert log.status_code == 200, log.text
    assert "Task finished: success" in log.text
