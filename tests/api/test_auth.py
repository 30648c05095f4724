"""Tokens, roles, and every mutating route guarded: found from the app's route table."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from sqlalchemy import Engine, select, update

from tailrace.api._auth import require_admin
from tailrace.api.routes import AUTHENTICATED, auth
from tailrace.clock import utcnow
from tailrace.db.models import ApiToken, TaskInstance, User
from tailrace.users import issue_token, verify_password

from .conftest import PASSWORDS, Api

MUTATING = {"POST", "PUT", "PATCH", "DELETE"}
# Logging in needs no token; logging out (the session cookie's token) needs none either.
PUBLIC = {
    ("POST", "/api/v1/auth/token"),
    ("POST", "/api/v1/auth/session"),
    ("DELETE", "/api/v1/auth/session"),
}


def served_routes(app: FastAPI) -> set[tuple[str, str]]:
    """Every (METHOD, path) the app serves, from the OpenAPI document it publishes."""
    return {
        (method.upper(), path)
        for path, operations in app.openapi()["paths"].items()
        for method in operations
    }


def event_stream_routes(app: FastAPI) -> set[str]:
    """Paths whose answer is a live stream of Server-Sent Events."""
    return {
        path
        for path, operations in app.openapi()["paths"].items()
        if "text/event-stream"
        in operations.get("get", {}).get("responses", {}).get("200", {}).get("content", {})
    }


def mutating_routes(app: FastAPI) -> set[tuple[str, str]]:
    return {(m, p) for m, p in served_routes(app) if m in MUTATING} - PUBLIC


def _requires_admin(dependant: Dependant) -> bool:
    return any(d.call is require_admin or _requires_admin(d) for d in dependant.dependencies)


PATH_VALUES = {
    "dag_id": "api_basic",
    "task_id": "one",
    "conn_id": "warehouse",
    "name": "db_pool",
    "key": "region",
    "try_number": 1,
    "task_instance_id": 1,
    "backfill_id": 1,
    "map_index": -1,
}


def _fill(path: str, run_id: str) -> str:
    return path.removeprefix("/api/v1").format(**PATH_VALUES, run_id=run_id, dag_run_id=run_id)


def test_a_password_gets_a_token_that_names_its_user(api: Api, engine: Engine) -> None:
    r = api.anonymous.post("/auth/token", json={"username": "vic", "password": PASSWORDS["vic"]})
    assert r.status_code == 201, r.text
    token = r.json()["access_token"]
    assert r.json()["token_type"] == "bearer"
    me = api.anonymous.get("/auth/me", headers={"Authorization": f"Bearer {token}"})
    assert me.json() == {"username": "vic", "role": "viewer"}
    with engine.connect() as conn:
        stored = conn.scalars(select(ApiToken.token_hash)).all()
        password_hash = conn.scalar(select(User.password_hash).where(User.username == "vic"))
    assert token not in stored and len(stored) == 3  # the fixture's two, and this one
    assert password_hash is not None and password_hash.startswith("scrypt$")
    assert PASSWORDS["vic"] not in password_hash
    assert verify_password(PASSWORDS["vic"], password_hash)
    assert not verify_password("wrong", password_hash)


def test_wrong_credentials_missing_bad_and_expired_tokens_get_401(api: Api, engine: Engine) -> None:
    for body in ({"username": "vic", "password": "nope"}, {"username": "nobody", "password": "x"}):
        r = api.anonymous.post("/auth/token", json=body)
        assert r.status_code == 401
        assert r.json()["error"]["code"] == "not_authenticated"
    now = utcnow()
    with engine.begin() as conn:
        user_id = conn.scalar(select(User.id).where(User.username == "ada"))
        assert user_id is not None
        expired, _ = issue_token(conn, user_id, now - timedelta(days=2))
    for headers in (
        {},
        {"Authorization": "Bearer not-a-token"},
        {"Authorization": f"Bearer {expired}"},
        {"Authorization": "Basic YWRhOmFkYQ=="},
    ):
        r = api.anonymous.get("/dags", headers=headers)
        assert r.status_code == 401, headers
        assert r.headers["www-authenticate"] == "Bearer"
        assert r.json()["error"]["code"] == "not_authenticated"


def test_every_read_route_needs_a_token_and_a_viewer_may_read(api: Api) -> None:
    live = event_stream_routes(api.server.app)
    assert len(live) >= 4
    for method, route_path in sorted(served_routes(api.server.app)):
        if method != "GET":
            continue
        path = _fill(route_path, "no_such_run")
        if path == "/auth/me":
            continue
        assert api.anonymous.get(path).status_code == 401, path
        # A live stream never ends by itself: its status is enough.
        with api.viewer.stream("GET", path) as response:
            assert response.status_code in (200, 404), path
            if route_path in live and response.status_code == 200:
                assert response.headers["content-type"].startswith("text/event-stream"), path


def test_every_mutating_route_declares_the_admin_dependency(api: Api) -> None:
    declared = set()
    for router in [*AUTHENTICATED, auth.router]:
        for route in router.routes:
            assert isinstance(route, APIRoute)
            for method in route.methods & MUTATING:
                path = "/api/v1" + route.path
                if (method, path) not in PUBLIC:
                    assert _requires_admin(route.dependant), f"{method} {path} lacks Admin"
                declared.add((method, path))
    assert declared - PUBLIC == mutating_routes(api.server.app), "a router is not listed"


def _cases(
    api: Api, run_id: str, finished_run: str
) -> dict[tuple[str, str], Callable[[], httpx.Response]]:
    """One successful admin request per mutating route (a replay needs a finished run)."""
    base = "/api/v1/dags/{dag_id}"
    run = base + "/runs/{run_id}"
    ti = run + "/task-instances/{task_id}"

    def call(method: str, path: str, **kwargs: Any) -> Callable[[], httpx.Response]:
        return lambda: api.admin.request(method, _fill(path, run_id), **kwargs)

    return {
        # First: a response is taken only while the task waits (before the marks below).
        **_hitl_cases(api, run_id),
        ("PATCH", base): call("PATCH", base, json={"is_paused": True}),
        ("POST", base + "/runs"): call("POST", base + "/runs", json={"run_id": "second"}),
        ("POST", run + "/clear"): call("POST", run + "/clear", json={"task_ids": ["two"]}),
        ("POST", run + "/replay"): lambda: api.admin.post(
            f"/dags/api_basic/runs/{finished_run}/replay", json={"task_id": "two"}
        ),
        ("POST", ti + "/clear"): call("POST", ti + "/clear"),
        ("PATCH", ti): call("PATCH", ti, json={"state": "success"}),
        ("POST", "/api/v1/connections"): call(
            "POST", "/api/v1/connections", json={"conn_id": "other", "uri": "http://x"}
        ),
        ("DELETE", "/api/v1/connections/{conn_id}"): call(
            "DELETE", "/api/v1/connections/{conn_id}"
        ),
        ("POST", "/api/v1/assets/events"): call(
            "POST", "/api/v1/assets/events", json={"asset": "api_basic_out", "extra": {"n": 1}}
        ),
        ("PUT", "/api/v1/pools/{name}"): call("PUT", "/api/v1/pools/{name}", json={"slots": 3}),
        ("DELETE", "/api/v1/pools/{name}"): call("DELETE", "/api/v1/pools/{name}"),
        ("POST", "/api/v1/variables"): call(
            "POST", "/api/v1/variables", json={"key": "other", "value": "x"}
        ),
        ("PATCH", "/api/v1/variables/{key}"): call(
            "PATCH", "/api/v1/variables/{key}", json={"value": "us-east-1"}
        ),
        ("DELETE", "/api/v1/variables/{key}"): call("DELETE", "/api/v1/variables/{key}"),
        **_backfill_cases(call),
    }


def _hitl_cases(api: Api, run_id: str) -> dict[tuple[str, str], Callable[[], httpx.Response]]:
    one = "/api/v1/hitlDetails/{dag_id}/{dag_run_id}/{task_id}"
    body = {"chosen_options": ["yes"]}
    return {
        ("PATCH", one): lambda: api.admin.patch(_fill(one, run_id), json=body),
        # Another task of the run: a request gets one response.
        ("PATCH", one + "/{map_index}"): lambda: api.admin.patch(
            f"/hitlDetails/api_basic/{run_id}/two/-1", json=body
        ),
    }


def _ask(engine: Engine, run_id: str) -> None:
    """Both tasks of the run wait for a person, deferred (as their HITL triggers would
    have them, and record)."""
    from tailrace.store import hitl

    with engine.begin() as conn:
        for task_id in ("one", "two"):
            ti_id = hitl.find_ti(conn, "api_basic", run_id, task_id, -1)
            assert ti_id is not None
            conn.execute(
                update(TaskInstance).where(TaskInstance.id == ti_id).values(state="deferred")
            )
            hitl.ask(
                conn,
                ti_id,
                subject="?",
                body=None,
                options=["yes"],
                defaults=None,
                multiple=False,
                params={},
                now=utcnow(),
            )


BACKFILLED = """
from datetime import datetime
from tailrace import EmptyOperator, DAG

with DAG("api_daily", schedule="@daily", start_date=datetime(2026, 1, 1),
         end_date=datetime(2026, 1, 2)):
    EmptyOperator(task_id="t")
"""


def _backfill_cases(
    call: Callable[..., Callable[[], httpx.Response]],
) -> dict[tuple[str, str], Callable[[], httpx.Response]]:
    body = {"dag_id": "api_daily", "from_date": "2026-11-01", "to_date": "2026-11-02"}
    one = "/api/v1/backfills/{backfill_id}"
    return {
        ("POST", "/api/v1/backfills"): call("POST", "/api/v1/backfills", json=body),
        ("POST", "/api/v1/backfills/dry_run"): call("POST", "/api/v1/backfills/dry_run", json=body),
        ("PUT", one + "/pause"): call("PUT", one + "/pause"),
        ("PUT", one + "/unpause"): call("PUT", one + "/unpause"),
        ("PUT", one + "/cancel"): call("PUT", one + "/cancel"),
    }


def test_mutating_routes_answer_401_without_a_token_403_to_a_viewer_and_work_for_an_admin(
    api: Api, harness: Any
) -> None:
    # A finished run to replay; then a run and a connection to act on: no scheduler runs
    # from here on, so nothing moves on its own.
    done = api.admin.post("/dags/api_basic/runs", json={"run_id": "done"}).json()["run_id"]
    harness.run(_pk(harness, done))
    run_id = api.admin.post("/dags/api_basic/runs", json={"run_id": "first"}).json()["run_id"]
    assert (
        api.admin.post(
            "/connections", json={"conn_id": "warehouse", "uri": "postgresql://u:pw@db/w"}
        ).status_code
        == 201
    )
    assert api.admin.post("/variables", json={"key": "region", "value": "eu"}).status_code == 201
    _ask(harness.engine, run_id)
    (Path(harness.dags_folder) / "api_daily.py").write_text(BACKFILLED)
    harness.parse()
    cases = _cases(api, run_id, done)
    assert set(cases) == mutating_routes(api.server.app), "a mutating route has no case here"
    for method, path in sorted(cases):
        url = _fill(path, run_id)
        anonymous = api.anonymous.request(method, url, json={})
        assert anonymous.status_code == 401, (method, path)
        assert anonymous.json()["error"]["code"] == "not_authenticated"
        viewer = api.viewer.request(method, url, json={})
        assert viewer.status_code == 403, (method, path)
        assert viewer.json()["error"]["code"] == "forbidden"
    # Refused requests changed nothing.
    assert [r["run_id"] for r in api.viewer.get("/dags/api_basic/runs").json()["items"]] == [
        "first",
        "done",
    ]
    assert api.viewer.get("/dags/api_basic").json()["paused"] is False
    assert [c["conn_id"] for c in api.viewer.get("/connections").json()["items"]] == ["warehouse"]
    for key, request in cases.items():
        response = request()
        assert 200 <= response.status_code < 300, (key, response.text)
    assert api.viewer.get("/dags/api_basic").json()["paused"] is True
    tis = api.viewer.get(f"/dags/api_basic/runs/{run_id}/task-instances").json()["items"]
    assert {t["task_id"]: t["state"] for t in tis} == {"one": "success", "two": None}
    assert [c["conn_id"] for c in api.viewer.get("/connections").json()["items"]] == ["other"]
    assert [v["key"] for v in api.viewer.get("/variables").json()["items"]] == ["other"]


def _pk(harness: Any, run_id: str) -> int:
    from sqlalchemy import select

    from tailrace.db.models import DagRun

    with harness.engine.connect() as conn:
        pk = conn.scalar(select(DagRun.id).where(DagRun.run_id == run_id))
    assert pk is not None
    return int(pk)
