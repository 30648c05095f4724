"""Cursor pagination walks every list; every error answers with the same body."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Api


def _walk(api: Api, path: str, limit: int, **params: Any) -> list[list[dict[str, Any]]]:
    pages: list[list[dict[str, Any]]] = []
    cursor = None
    while True:
        query = {**params, "limit": limit, **({"cursor": cursor} if cursor else {})}
        r = api.viewer.get(path, params=query)
        assert r.status_code == 200, r.text
        body = r.json()
        pages.append(body["items"])
        cursor = body["next_cursor"]
        if cursor is None:
            return pages
        assert len(pages) < 100, "pagination does not end"


def test_connections_page_through_in_id_order_with_secrets_masked(api: Api) -> None:
    for n in range(7):
        uri = f"postgresql://user:secret{n}@db/x?sslmode=require&api_token=zzz{n}"
        r = api.admin.post("/connections", json={"conn_id": f"c{n}", "uri": uri})
        assert r.status_code == 201, r.text
    pages = _walk(api, "/connections", 3)
    assert [len(p) for p in pages] == [3, 3, 1]
    items = [c for p in pages for c in p]
    assert [c["conn_id"] for c in items] == [f"c{n}" for n in range(7)]
    assert all("secret" not in c["uri"] and "zzz" not in c["uri"] for c in items)
    assert items[0]["uri"] == "postgresql://user:***@db/x?sslmode=require&api_token=***"
    assert api.viewer.get("/connections/c3").json()["uri"].startswith("postgresql://user:***@")
    dup = api.admin.post("/connections", json={"conn_id": "c3", "uri": "http://x"})
    assert dup.status_code == 409
    assert dup.json()["error"]["code"] == "conflict"
    assert "connection 'c3' already exists" in dup.json()["error"]["message"]


def test_a_malformed_uri_is_refused_naming_its_problem_without_its_password(api: Api) -> None:
    r = api.admin.post("/connections", json={"conn_id": "bad", "uri": "http://u:pw-9@h:99999/"})
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid_uri"
    assert "Port out of range" in error["message"] and "http://u:***@h:99999/" in error["message"]
    assert "pw-9" not in r.text
    assert api.viewer.get("/connections/bad").status_code == 404


def test_runs_page_newest_first_and_task_instances_in_order(api: Api, harness: Any) -> None:
    for n in range(5):
        assert api.admin.post("/dags/api_basic/runs", json={"run_id": f"r{n}"}).status_code == 201
    pages = _walk(api, "/dags/api_basic/runs", 2)
    assert [[r["run_id"] for r in p] for p in pages] == [["r4", "r3"], ["r2", "r1"], ["r0"]]
    tis = _walk(api, "/dags/api_basic/runs/r0/task-instances", 1)
    assert [[t["task_id"] for t in p] for p in tis] == [["one"], ["two"]]
    dags = _walk(api, "/dags", 2)
    assert [[d["dag_id"] for d in p] for p in dags] == [
        ["api_basic", "api_live"],
        ["api_mapped", "api_stream"],
    ]


def test_a_page_exactly_full_has_no_next_cursor(api: Api) -> None:
    for n in range(2):
        api.admin.post("/connections", json={"conn_id": f"c{n}", "uri": "http://x"})
    assert _walk(api, "/connections", 2) == [
        [
            {"conn_id": "c0", "uri": "http://x", "description": None},
            {"conn_id": "c1", "uri": "http://x", "description": None},
        ]
    ]


@pytest.mark.parametrize("db_backend", ["sqlite"])
def test_a_bad_or_foreign_cursor_is_a_400(api: Api) -> None:
    for n in range(3):
        api.admin.post("/connections", json={"conn_id": f"c{n}", "uri": "http://x"})
    cursor = api.viewer.get("/connections", params={"limit": 1}).json()["next_cursor"]
    foreign = api.viewer.get("/dags", params={"cursor": cursor})
    assert foreign.status_code == 400
    assert foreign.json()["error"]["code"] == "invalid_cursor"
    for junk in ("!!!", "bm90IGpzb24", "WyJjb25uZWN0aW9ucyIsIDFd"):  # bad base64, not JSON, int key
        r = api.viewer.get("/connections", params={"cursor": junk})
        assert r.status_code == 400, junk
        assert r.json()["error"]["code"] == "invalid_cursor"


@pytest.mark.parametrize("db_backend", ["sqlite"])
def test_errors_share_one_body(api: Api) -> None:
    cases = [
        (api.viewer.get("/no/such/route"), 404, "not_found"),
        (api.viewer.get("/dags/nope"), 404, "not_found"),
        (api.viewer.get("/dags/api_basic/runs/none"), 404, "not_found"),
        (api.viewer.delete("/dags"), 405, "method_not_allowed"),
        (api.viewer.get("/dags", params={"limit": 0}), 422, "validation_error"),
        (
            api.admin.post("/connections", json={"conn_id": "has space", "uri": "x"}),
            422,
            "validation_error",
        ),
        (
            api.admin.post(
                "/connections", content=b"not json", headers={"content-type": "application/json"}
            ),
            422,
            "validation_error",
        ),
        (api.anonymous.get("/dags"), 401, "not_authenticated"),
        (api.viewer.post("/connections", json={"conn_id": "a", "uri": "x"}), 403, "forbidden"),
    ]
    for response, status, code in cases:
        assert response.status_code == status, response.text
        body = response.json()
        assert set(body) == {"error"}
        assert set(body["error"]) == {"code", "message", "detail"}
        assert body["error"]["code"] == code
        assert body["error"]["message"]
    invalid = api.viewer.get("/dags", params={"limit": 0}).json()["error"]
    assert invalid["detail"][0]["loc"] == ["query", "limit"]


def test_variables_page_through_by_key_with_secret_values_masked(api: Api) -> None:
    for n in range(5):
        r = api.admin.post("/variables", json={"key": f"v{n}", "value": f"value {n}"})
        assert r.status_code == 201, r.text
    r = api.admin.post(
        "/variables", json={"key": "api_token", "value": "tk-123456", "description": "d"}
    )
    assert r.json() == {"key": "api_token", "value": "***", "description": "d"}
    pages = _walk(api, "/variables", 4)
    assert [[v["key"] for v in p] for p in pages] == [
        ["api_token", "v0", "v1", "v2"],
        ["v3", "v4"],
    ]
    assert api.viewer.get("/variables/api_token").json()["value"] == "***"
    assert api.viewer.get("/variables/v1").json()["value"] == "value 1"
    dup = api.admin.post("/variables", json={"key": "v1", "value": "x"})
    assert dup.status_code == 409 and "PATCH /variables/v1" in dup.json()["error"]["message"]
    assert api.admin.patch("/variables/nope", json={"value": "x"}).status_code == 404
    patched = api.admin.patch("/variables/v1", json={"value": "new"})
    assert patched.json() == {"key": "v1", "value": "new", "description": None}
    assert api.admin.delete("/variables/v1").status_code == 204
    assert api.viewer.get("/variables/v1").status_code == 404
