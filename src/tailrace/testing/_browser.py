"""`tailrace standalone` as a real process, and Debian's Chromium driven by Playwright, for
browser tests and the documentation's screenshots. Playwright (a dev dependency) is imported
only by the functions that need it; its own browser downloads are never used."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from tailrace.testing._wait import wait_for

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Page

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
_UI_URL = re.compile(r"Tailrace web UI: (http://\S+?)/?\s*$")


def chromium_path() -> str | None:
    """Debian's Chromium (``TAILRACE_TEST_CHROMIUM`` overrides), or None when absent."""
    path = os.environ.get("TAILRACE_TEST_CHROMIUM", CHROMIUM)
    return path if Path(path).is_file() and os.access(path, os.X_OK) else None


def free_port() -> int:
    """A port nothing listens on now (api_port cannot be 0, so the test picks one)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Standalone:
    """A running ``tailrace standalone``: its UI address, admin password and output."""

    proc: subprocess.Popen[str]
    url: str
    home: Path
    output: list[str] = field(default_factory=list)

    @property
    def admin_password(self) -> str:
        return (self.home / "standalone_admin_password.txt").read_text().strip()

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "TAILRACE_HOME": str(self.home)}
        return subprocess.run(
            [sys.executable, "-m", "tailrace", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )


@contextmanager
def standalone(home: Path, env: Mapping[str, str] | None = None) -> Iterator[Standalone]:
    """``tailrace standalone`` in ``home`` on a free port (its bundled example DAGs unless
    ``env`` names a dags folder); stopped, and its output kept, on exit."""
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TAILRACE_")},
        "TAILRACE_HOME": str(home),
        "TAILRACE_API_PORT": str(free_port()),
        "TAILRACE_WORKER_PROCESSES": "2",
        **(env or {}),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "tailrace", "standalone"],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    output: list[str] = []
    url = None
    for line in proc.stdout:
        output.append(line)
        if match := _UI_URL.search(line):
            url = match.group(1)
        if "Ctrl-C stops" in line:
            break
    if url is None:
        proc.kill()
        proc.wait()
        raise RuntimeError("`tailrace standalone` did not start:\n" + "".join(output))
    # Keep reading, so a chatty process never blocks on a full pipe.
    reader = threading.Thread(target=lambda: output.extend(proc.stdout or ()), daemon=True)
    reader.start()
    try:
        yield Standalone(proc, url, home, output)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(timeout=5)
        proc.stdout.close()


@contextmanager
def chromium(viewport: tuple[int, int] = (1280, 800)) -> Iterator[BrowserContext]:
    """A headless Chromium context with a fresh profile."""
    from playwright.sync_api import sync_playwright

    executable = chromium_path()
    if executable is None:
        raise RuntimeError(f"no Chromium at {CHROMIUM}: apt-get install chromium")
    profile = tempfile.mkdtemp(prefix="tailrace-chromium-")
    try:
        with sync_playwright() as playwright:
            context = playwright.chromium.launch_persistent_context(
                profile,
                executable_path=executable,
                args=CHROMIUM_ARGS,
                headless=True,
                viewport={"width": viewport[0], "height": viewport[1]},
            )
            try:
                yield context
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def api_client(app: Standalone) -> httpx.Client:
    """An HTTP client of the standalone's REST API, as its admin (a bearer token)."""
    token = httpx.post(
        f"{app.url}/api/v1/auth/token",
        json={"username": "admin", "password": app.admin_password},
    ).json()["access_token"]
    return httpx.Client(
        base_url=f"{app.url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=30
    )


def run_to_end(
    client: httpx.Client, dag_id: str, run_id: str, conf: Mapping[str, object] | None = None
) -> str:
    """Trigger ``run_id`` of ``dag_id`` and wait until it has finished; its final state."""
    created = client.post(f"/dags/{dag_id}/runs", json={"run_id": run_id, "conf": conf or {}})
    created.raise_for_status()

    def finished() -> str:
        state = str(client.get(f"/dags/{dag_id}/runs/{run_id}").json()["state"])
        return state if state in ("success", "failed") else ""

    return wait_for(finished, timeout=120, interval=0.2)


def log_in(page: Page, url: str, username: str, password: str) -> None:
    """Log in through the UI's form and wait for the DAG list."""
    page.goto(f"{url}/#/login")
    page.fill("#username", username)
    page.fill("#password", password)
    page.click("button[type=submit]")
    page.wait_for_selector("#dag-table, .empty")
