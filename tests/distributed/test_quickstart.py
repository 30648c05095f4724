"""The deployment guide's quick start, as written: deploy/quickstart.sh starts each
component in an environment of its own (the worker with no database credentials and no
secret key), and a DAG runs on it end to end."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from tailrace.db.models import DagRun, XCom
from tailrace.testing import run_cli, wait_for

from .conftest import _free_port

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "quickstart.sh"
GUIDE = ROOT / "docs" / "deployment.md"
COMMANDS = ("api-server", "scheduler", "triggerer", "worker")
READY = ("api-server running", "Scheduler running", "triggerer running", "Worker ready")

DAG = """
from datetime import datetime
from tailrace import dag, task

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def quickstart():
    @task
    def hello():
        return "hello from a worker"

    hello()

quickstart()
"""


def _components(script: subprocess.Popen[str]) -> dict[str, dict[str, str]]:
    """The `tailrace` processes the script started: command -> environment."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if os.getsid(int(proc.name)) != script.pid:
                continue
            args = (proc / "cmdline").read_bytes().split(b"\0")
            environ = (proc / "environ").read_bytes().split(b"\0")
            names = [a.decode() for a in args]
            command = next(
                (n for n in names if n in ("api-server", "scheduler", "triggerer", "worker")), None
            )
            if command is not None and any(n.endswith("tailrace") for n in names):
                found[command] = dict(e.decode().split("=", 1) for e in environ if b"=" in e)
    return found


def test_the_guide_shows_the_scripts_components_and_their_environments() -> None:
    guide = GUIDE.read_text()
    for line in (
        'env -i "${shared[@]}" "${owners[@]}" tailrace scheduler',
        'env -i "${shared[@]}" tailrace worker --queues default --concurrency 2',
    ):
        assert line in SCRIPT.read_text()
    assert "deploy/quickstart.sh" in guide
    # The guide's per-machine block gives the worker no database URL and no secret key.
    worker_block = re.search(r"# On each worker machine.*?```", guide, re.S)
    assert worker_block is not None, "docs/deployment.md lost its worker block"
    assert "TAILRACE_DATABASE_URL" not in worker_block.group(0)
    assert "TAILRACE_SECRET_KEY" not in worker_block.group(0)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("db_backend", ["postgres"])
@pytest.mark.parametrize("broker_url", ["redis"], indirect=True)
def test_the_quick_start_script_runs_a_dag_with_a_worker_that_holds_no_credentials(
    database_url: str, broker_url: str, engine: Engine, dags_folder: Path, tmp_path: Path
) -> None:
    (dags_folder / "quickstart.py").write_text(DAG)
    port = _free_port()
    env = {
        # The `tailrace` command of this interpreter's environment.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "TAILRACE_DATABASE_URL": database_url,
        "TAILRACE_CELERY_BROKER_URL": broker_url,
        "TAILRACE_DAGS_FOLDER": str(dags_folder),
        "TAILRACE_HOME": str(tmp_path / "home"),
        "TAILRACE_API_PORT": str(port),
    }
    script = subprocess.Popen(
        [str(SCRIPT)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert script.stdout is not None
    output: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert script.stdout is not None
        for line in script.stdout:
            output.append(line)
            if all(any(r in seen for seen in output) for r in READY):
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert ready.wait(150), "".join(output)
        components = _components(script)
        assert set(components) == {"api-server", "scheduler", "triggerer", "worker"}, components
        worker = components["worker"]
        assert "TAILRACE_DATABASE_URL" not in worker and "TAILRACE_SECRET_KEY" not in worker
        assert (
            components["scheduler"]["TAILRACE_SECRET_KEY"]
            == components["api-server"]["TAILRACE_SECRET_KEY"]
        )
        banner = "".join(output)
        assert "worker processes" not in banner.split("Scheduler running", 1)[1].split("\n")[0]

        cli = {**os.environ, **env, "TAILRACE_EXECUTOR": "celery"}
        triggered = run_cli(cli, "dags", "trigger", "quickstart")
        assert triggered.returncode == 0, triggered.stderr

        def finished() -> str | None:
            with engine.connect() as conn:
                state = conn.scalar(select(DagRun.state).where(DagRun.dag_id == "quickstart"))
            return state if state in ("success", "failed") else None

        assert wait_for(finished, timeout=120) == "success", "".join(output)
        with engine.connect() as conn:
            assert conn.scalar(select(XCom.value).where(XCom.task_id == "hello")) == (
                '"hello from a worker"'
            )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(script.pid, signal.SIGTERM)
        try:
            script.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(script.pid, signal.SIGKILL)
            script.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(script.pid, signal.SIGKILL)
        script.stdout.close()
