"""Pools over the REST API: created and resized with PUT, listed with their usage,
default_pool kept."""

from __future__ import annotations

from sqlalchemy import Engine

from tailrace.store import pools

from .conftest import Api


def test_pools_are_put_listed_read_and_deleted(api: Api, engine: Engine) -> None:
    with engine.begin() as conn:
        pools.ensure_default_pool(conn, 128)
    created = api.admin.put(
        "/pools/db_pool", json={"slots": 4, "description": "The orders database"}
    )
    assert created.status_code == 200, created.text
    assert created.json() == {
        "name": "db_pool",
        "slots": 4,
        "description": "The orders database",
        "include_deferred": False,
        "running_slots": 0,
        "queued_slots": 0,
        "deferred_slots": 0,
        "occupied_slots": 0,
        "open_slots": 4,
    }
    resized = api.admin.put("/pools/db_pool", json={"slots": 2, "include_deferred": True})
    assert (resized.json()["slots"], resized.json()["include_deferred"]) == (2, True)
    listed = api.viewer.get("/pools").json()["items"]
    assert [(p["name"], p["slots"]) for p in listed] == [("db_pool", 2), ("default_pool", 128)]
    assert api.viewer.get("/pools/db_pool").json()["open_slots"] == 2
    assert api.viewer.put("/pools/db_pool", json={"slots": 9}).status_code == 403
    assert api.admin.put("/pools/db_pool", json={"slots": -1}).status_code == 422
    refused = api.admin.delete("/pools/default_pool")
    assert refused.status_code == 409
    assert "default_pool cannot be deleted" in refused.json()["error"]["message"]
    assert api.admin.delete("/pools/db_pool").status_code == 204
    assert api.admin.delete("/pools/db_pool").status_code == 404
    assert api.viewer.get("/pools/db_pool").status_code == 404
