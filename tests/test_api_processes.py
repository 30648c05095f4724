"""``api_processes``: the API served by several processes on one port (ADR 0041). Each
answers; a login made through one is honoured by another (sessions and tokens live in the
database, the CSRF rule is every process's); a live view in each shows a change made
through another; a process that dies is started again; and stopping standalone or an
api-server leaves none of them running."""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tailrace.api._listen import bind_group
from tailrace.api.errors import ApiServerError
from tailrace.config import load_settings
from tailrace.standalone import ApiProcess, Services
from tailrace.testing import component_env, start_component, stop_component, wait_for

# Processes and sockets are what is tested: one database backend will do.
sqlite_only = pytest.mark.parametrize("db_backend", ["sqlite"])


LIVE_DAG = """
from datetime import datetime
from tailrace import dag, task

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def live():
    @task
    def noop():
        return 1

    noop()

live()
"""


@pytest.fixture
def services(database_url: str, tailrace_home: Path, dags_folder: Path) -> Iterator[Services]:
    settings = load_settings(
        {
            "TAILRACE_HOME": str(tailrace_home),
            "TAILRACE_DATABASE_URL": database_url,
            "TAILRACE_DAGS_FOLDER": str(dags_folder),
            "TAILRACE_WORKER_PROCESSES": "1",
            "TAILRACE_API_PROCESSES": "2",
        }
    )
    settings = dataclasses.replace(settings, api_port=0)  # any free port
    (dags_folder / "live.py").write_text(LIVE_DAG)
    services = Services(settings, api_enabled=True, create_admin=True)
    services.prepare()
    services.start()
    try:
        yield services
    finally:
        services.stop()


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def _server_inode(server_port: int, client_port: int) -> str | None:
    """The inode of the accepted socket serving the connection from ``client_port``."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, remote, inode = fields[1], fields[2], fields[9]
            if (
                int(local.rsplit(":", 1)[1], 16) == server_port
                and int(remote.rsplit(":", 1)[1], 16) == client_port
            ):
                return inode
    return None


def _connection(port: int) -> tuple[http.client.HTTPConnection, int]:
    """An open keep-alive connection, once a request through it has been answered."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/")  # the web UI's page: no login
    reply = conn.getresponse()
    reply.read()
    assert reply.status == 200
    assert conn.sock is not None
    return conn, int(conn.sock.getsockname()[1])


def _one_connection_per_process(api: ApiProcess) -> dict[int, http.client.HTTPConnection]:
    """A connection served by each API process (the kernel picks the process: new
    connections until each has one; the others are closed)."""
    found: dict[int, http.client.HTTPConnection] = {}
    pids = api.pids
    for _ in range(200):
        conn, client_port = _connection(api.port)
        inode = _server_inode(api.port, client_port)
        owner = next((pid for pid in pids if inode in _socket_inodes(pid)), None)
        assert owner is not None, f"no API process serves the connection from {client_port}"
        if owner in found:
            conn.close()
        else:
            found[owner] = conn
        if len(found) == len(pids):
            return found
    raise AssertionError(f"200 connections, and only {sorted(found)} of {pids} served any")


def _call(
    conn: http.client.HTTPConnection,
    method: str,
    path: str,
    body: object = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, object], http.client.HTTPResponse]:
    payload = None if body is None else json.dumps(body)
    all_headers = {"Content-Type": "application/json", **(headers or {})}
    conn.request(method, path, body=payload, headers=all_headers)
    reply = conn.getresponse()
    data = reply.read()
    return reply.status, (json.loads(data) if data else {}), reply


@sqlite_only
def test_two_api_processes_answer_and_honour_a_session_made_through_the_other(
    services: Services,
) -> None:
    api = services.api
    assert isinstance(api, ApiProcess) and services.admin is not None
    assert len(set(api.pids)) == 2 and os.getpid() not in api.pids
    connections = _one_connection_per_process(api)
    try:
        _log_in_through_one_use_through_the_other(services, *connections.values())
    finally:
        for conn in connections.values():
            conn.close()


def _log_in_through_one_use_through_the_other(
    services: Services, first: http.client.HTTPConnection, second: http.client.HTTPConnection
) -> None:
    assert services.admin is not None
    password = services.admin.password_file.read_text().strip()

    status, _, reply = _call(
        first, "POST", "/api/v1/auth/session", {"username": "admin", "password": password}
    )
    assert status == 201
    cookie = reply.getheader("set-cookie", "").split(";", 1)[0]
    assert cookie.startswith("tailrace_session=")
    status, me, _ = _call(second, "GET", "/api/v1/auth/me", headers={"Cookie": cookie})
    assert (status, me["username"]) == (200, "admin")
    # The other process applies the CSRF rule to the same session.
    status, refused, _ = _call(
        second, "PATCH", "/api/v1/dags/nothing", {"is_paused": True}, {"Cookie": cookie}
    )
    assert status == 403 and refused["error"]["code"] == "csrf"  # type: ignore[index]

    status, token, _ = _call(
        second, "POST", "/api/v1/auth/token", {"username": "admin", "password": password}
    )
    assert status == 201
    bearer = {"Authorization": f"Bearer {token['access_token']}"}
    status, me, _ = _call(first, "GET", "/api/v1/auth/me", headers=bearer)
    assert (status, me["username"]) == (200, "admin")


def _snapshot(reply: http.client.HTTPResponse) -> dict[str, object]:
    """The next ``snapshot`` event's data from a live stream (blocks until it comes)."""
    event = None
    for raw in iter(reply.fp.readline, b""):
        line = raw.decode().rstrip("\n")
        if line.startswith("event: "):
            event = line[len("event: ") :]
        elif line.startswith("data: ") and event == "snapshot":
            data: dict[str, object] = json.loads(line[len("data: ") :])
            return data
    raise AssertionError("the stream ended without a snapshot")


def _paused(snapshot: dict[str, object]) -> dict[str, bool]:
    items = snapshot["items"]
    assert isinstance(items, list)
    return {item["dag_id"]: item["paused"] for item in items}


@sqlite_only
def test_live_views_in_every_api_process_show_a_change_made_through_another(
    services: Services,
) -> None:
    api = services.api
    assert isinstance(api, ApiProcess) and services.admin is not None
    connections = _one_connection_per_process(api)
    first, second = connections.values()
    try:
        password = services.admin.password_file.read_text().strip()
        status, token, _ = _call(
            first, "POST", "/api/v1/auth/token", {"username": "admin", "password": password}
        )
        assert status == 201
        bearer = {"Authorization": f"Bearer {token['access_token']}"}
        streams = []
        for conn in (first, second):
            conn.request("GET", "/api/v1/ui/dags/events", headers=bearer)
            reply = conn.getresponse()
            assert reply.status == 200
            assert _paused(_snapshot(reply)) == {"live": True}
            streams.append(reply)
        # The change goes through a third connection, to whichever process the kernel picks.
        writer, _ = _connection(api.port)
        try:
            status, _, _ = _call(writer, "PATCH", "/api/v1/dags/live", {"is_paused": False}, bearer)
            assert status == 200
        finally:
            writer.close()
        for reply in streams:
            assert _paused(_snapshot(reply)) == {"live": False}
    finally:
        for conn in connections.values():
            conn.close()


@sqlite_only
def test_a_dead_api_process_is_started_again_beside_the_other(services: Services) -> None:
    api = services.api
    assert isinstance(api, ApiProcess)
    dead, alive = api.pids
    os.kill(dead, signal.SIGKILL)
    wait_for(lambda: api.restarts == 1 and len(api.pids) == 2 and dead not in api.pids)
    assert alive in api.pids
    connections = _one_connection_per_process(api)
    for conn in connections.values():
        conn.close()
    assert len(connections) == 2
    assert services.failure is None


@sqlite_only
def test_stopping_standalone_leaves_no_api_process(services: Services) -> None:
    api = services.api
    assert isinstance(api, ApiProcess)
    pids = api.pids
    assert len(pids) == 2
    services.stop()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", api.port)) != 0


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@sqlite_only
def test_api_server_takes_api_processes_and_its_stop_ends_them(
    database_url: str, dags_folder: Path, tailrace_home: Path, tmp_path: Path
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = component_env(
        database_url, dags_folder, home=str(tailrace_home), api_port=port, api_processes=3
    )
    proc = start_component(env, "api-server", output=tmp_path / "api-server.log")
    try:
        children = _children(proc.pid)
        # Three children listening on the port (multiprocessing's resource tracker, a
        # child too, does not).
        serving = [pid for pid in children if _serves(pid, port)]
        assert len(serving) == 3, (children, [_cmdline(pid) for pid in children])
        conn, _ = _connection(port)
        conn.close()
    finally:
        assert stop_component(proc) == 0
    for pid in serving:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _serves(pid: int, port: int) -> bool:
    """Whether ``pid`` holds a socket listening on ``port``."""
    inodes = _socket_inodes(pid)
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            listening = fields[3] == "0A"
            if listening and int(fields[1].rsplit(":", 1)[1], 16) == port and fields[9] in inodes:
                return True
    return False


def test_a_port_served_already_is_refused_with_several_processes_too() -> None:
    first = bind_group("127.0.0.1", 0, 2)
    try:
        port = first[0].getsockname()[1]
        assert all(sock.getsockname()[1] == port for sock in first)
        with pytest.raises(ApiServerError, match="cannot listen"):
            bind_group("127.0.0.1", port, 2)
    finally:
        for sock in first:
            sock.close()
