"""Standalone serves its API from a child process of its own, supervised: readers never
run in the scheduler's process, a dead API is started again on the same port, and one that
keeps dying stops standalone with a reason rather than leave it half up."""

from __future__ import annotations

import dataclasses
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tailrace import standalone
from tailrace.config import load_settings
from tailrace.standalone import ApiProcess, Services
from tailrace.testing import wait_for


@pytest.fixture
def services(database_url: str, tailrace_home: Path, dags_folder: Path) -> Iterator[Services]:
    settings = load_settings(
        {
            "TAILRACE_HOME": str(tailrace_home),
            "TAILRACE_DATABASE_URL": database_url,
            "TAILRACE_DAGS_FOLDER": str(dags_folder),
            "TAILRACE_WORKER_PROCESSES": "1",
        }
    )
    settings = dataclasses.replace(settings, api_port=0)  # any free port
    services = Services(settings, api_enabled=True, create_admin=True)
    services.prepare()
    services.start()
    try:
        yield services
    finally:
        services.stop()


def _me(services: Services) -> str:
    assert services.api is not None and services.admin is not None
    password = services.admin.password_file.read_text().strip()
    with httpx.Client(base_url=services.api.url + "/api/v1", timeout=30) as client:
        token = client.post("/auth/token", json={"username": "admin", "password": password})
        token.raise_for_status()
        me = client.get(
            "/auth/me", headers={"Authorization": f"Bearer {token.json()['access_token']}"}
        )
        me.raise_for_status()
        return str(me.json()["username"])


def _kill(api: ApiProcess) -> int:
    pid = api.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    return pid


@pytest.mark.parametrize("db_backend", ["sqlite"])
def test_the_api_is_served_by_a_child_process_started_again_when_it_dies(
    services: Services,
) -> None:
    api = services.api
    assert isinstance(api, ApiProcess)
    assert api.pid is not None and api.pid != os.getpid()
    assert _me(services) == "admin"
    url = api.url
    dead = _kill(api)
    wait_for(lambda: api.restarts == 1 and api.pid != dead)
    assert api.url == url
    assert _me(services) == "admin"
    assert services.failure is None and not services.should_stop.is_set()


@pytest.mark.parametrize("db_backend", ["sqlite"])
def test_an_api_that_keeps_dying_stops_standalone_with_the_reason(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(standalone, "API_MAX_RESTARTS", 2)
    api = services.api
    assert isinstance(api, ApiProcess)
    _kill(api)
    wait_for(lambda: api.restarts == 1)
    _kill(api)
    assert services.should_stop.wait(60)
    assert services.failure is not None and "API process died 2 times" in services.failure
