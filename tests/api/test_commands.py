"""`tailrace users`, `tailrace api-server` and `tailrace standalone` as a user runs them."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tailrace.standalone import API_MAX_RESTARTS
from tailrace.testing import run_cli, start_component, stop_component, wait_for


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def env(database_url: str, dags_folder: Path) -> dict[str, str]:
    return {
        **os.environ,
        "TAILRACE_DATABASE_URL": database_url,
        "TAILRACE_DAGS_FOLDER": str(dags_folder),
        "TAILRACE_WORKER_PROCESSES": "2",
        "TAILRACE_API_PORT": str(_free_port()),
        "COLUMNS": "200",
    }


def _token(base: str, username: str, password: str) -> httpx.Response:
    return httpx.post(
        f"{base}/api/v1/auth/token",
        json={"username": username, "password": password},
        # A restarted API process listens on its parent's socket before it serves: on a
        # loaded machine the first answer can take longer than httpx's default 5 s.
        timeout=60,
    )


@pytest.fixture
def api_server(env: dict[str, str]) -> Iterator[str]:
    proc = start_component(env, "api-server")
    yield f"http://127.0.0.1:{env['TAILRACE_API_PORT']}"
    assert stop_component(proc) == 0


def _start_and_read(env: dict[str, str], command: str) -> tuple[subprocess.Popen[str], str]:
    """Like ``start_component``, also returning what it printed until it was ready."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tailrace", command],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "Ctrl-C stops" in line:
            return proc, "".join(lines)
    raise AssertionError(f"`tailrace {command}` exited early: {''.join(lines)}")


def test_users_create_makes_users_who_log_in_to_the_api_server(
    env: dict[str, str], api_server: str
) -> None:
    base = api_server
    made = run_cli(env, "users", "create", "bob", "--role", "viewer", "--password", "pw-bob")
    assert made.returncode == 0, made.stderr
    assert "Created viewer bob" in made.stdout
    again = run_cli(env, "users", "create", "bob", "--role", "admin", "--password", "x")
    assert again.returncode == 1
    assert "already exists" in again.stderr
    bad_role = run_cli(env, "users", "create", "eve", "--role", "root", "--password", "x")
    assert bad_role.returncode == 1
    assert "role must be 'admin' or 'viewer'" in bad_role.stderr
    listed = run_cli(env, "users", "list")
    assert "bob" in listed.stdout and "viewer" in listed.stdout
    r = _token(base, "bob", "pw-bob")
    assert r.status_code == 201, r.text
    me = httpx.get(
        f"{base}/api/v1/auth/me", headers={"Authorization": f"Bearer {r.json()['access_token']}"}
    )
    assert me.json() == {"username": "bob", "role": "viewer"}
    assert httpx.get(f"{base}/api/v1/dags").status_code == 401


@pytest.mark.slow
@pytest.mark.parametrize("db_backend", ["sqlite"])
def test_standalone_serves_the_api_with_a_first_start_admin_and_runs_what_it_triggers(
    env: dict[str, str], tailrace_home: Path
) -> None:
    proc, printed = _start_and_read(env, "standalone")
    base = f"http://127.0.0.1:{env['TAILRACE_API_PORT']}"
    password_file = tailrace_home / "standalone_admin_password.txt"
    assert f"Tailrace web UI: {base}/" in printed
    assert f"API at {base}/api/v1" in printed
    assert f"with the password in {password_file}" in printed
    try:
        assert stat.S_IMODE(password_file.stat().st_mode) == 0o600
        password = password_file.read_text().strip()
        r = _token(base, "admin", password)
        assert r.status_code == 201, r.text
        client = httpx.Client(
            base_url=f"{base}/api/v1",
            headers={"Authorization": f"Bearer {r.json()['access_token']}"},
        )
        run_id = client.post("/dags/api_basic/runs", json={}).json()["run_id"]

        def finished() -> Any:
            state = client.get(f"/dags/api_basic/runs/{run_id}").json()["state"]
            return state if state in ("success", "failed") else None

        assert wait_for(finished, timeout=60) == "success"
        client.close()
    finally:
        assert stop_component(proc) == 0
    # A second start keeps the admin and its password.
    proc = start_component(env, "standalone")
    try:
        assert password_file.read_text().strip() == password
        assert _token(base, "admin", password).status_code == 201
    finally:
        assert stop_component(proc) == 0


def _listening_inode(port: int) -> str:
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1].endswith(f":{port:04X}") and fields[3] == "0A":  # LISTEN
            return fields[9]
    raise LookupError(f"nothing listens on port {port}")


def _api_child(parent: int, port: int) -> int | None:
    """The child of ``parent`` serving on ``port`` (the parent holds the socket too)."""
    socket_link = f"socket:[{_listening_inode(port)}]"
    # A restarted child is the child of the thread that started it: look under every one.
    for children in Path(f"/proc/{parent}/task").glob("*/children"):
        for child in children.read_text().split():
            with contextlib.suppress(OSError):
                fds = Path(f"/proc/{child}/fd")
                if any(os.readlink(fd) == socket_link for fd in fds.iterdir()):
                    return int(child)
    return None


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("db_backend", ["sqlite"])
def test_standalone_restarts_its_api_process_and_exits_1_when_it_keeps_dying(
    env: dict[str, str], tmp_path: Path
) -> None:
    port = int(env["TAILRACE_API_PORT"])
    base = f"http://127.0.0.1:{port}"
    output = tmp_path / "standalone.out"
    proc = start_component(env, "standalone", output=output)
    try:
        seen: set[int] = set()
        for _ in range(API_MAX_RESTARTS):
            pid = wait_for(lambda: (p := _api_child(proc.pid, port)) not in seen and p)
            # Served by that child: the scheduler's process does not answer HTTP itself.
            assert _token(base, "nobody", "wrong").status_code == 401
            seen.add(pid)
            os.kill(pid, signal.SIGKILL)
        assert proc.wait(timeout=120) == 1
    finally:
        stop_component(proc)
    printed = wait_for(lambda: (text := output.read_text()) and "stopped:" in text and text)
    assert f"the API process died {API_MAX_RESTARTS} times" in " ".join(printed.split())
