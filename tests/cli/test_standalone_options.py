"""`tailrace standalone --dags-folder/--port/--host/--examples`: your DAGs and the
examples together unless asked otherwise."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import httpx
import pytest

from tailrace.testing import run_cli, start_component, stop_component
from tailrace.testing._browser import free_port

MINE = """
from datetime import datetime
from tailrace import dag, task

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def my_own_dag():
    @task
    def hello():
        return "hi"

    hello()

my_own_dag()
"""


@pytest.fixture
def env(tmp_path: Path, database_url: str) -> dict[str, str]:
    return {
        **os.environ,
        "TAILRACE_DATABASE_URL": database_url,
        "TAILRACE_WORKER_PROCESSES": "2",
        "COLUMNS": "200",
    }


@pytest.fixture
def mine(tmp_path: Path) -> Path:
    folder = tmp_path / "my_dags"
    folder.mkdir()
    (folder / "mine.py").write_text(textwrap.dedent(MINE))
    return folder


def _start(env: dict[str, str], output: Path, *args: str) -> subprocess.Popen[str]:
    return start_component(env, "standalone", *args, output=output)


def _active(env: dict[str, str]) -> set[str]:
    done = run_cli(env, "dags", "list", "--json")
    assert done.returncode == 0, done.stderr
    return {d["dag_id"] for d in json.loads(done.stdout)}


@pytest.mark.parametrize("db_backend", ["sqlite"])
def test_your_dags_and_the_examples_then_yours_alone(
    env: dict[str, str], mine: Path, tmp_path: Path
) -> None:
    port = free_port()
    log = tmp_path / "standalone.log"
    proc = _start(env, log, "--dags-folder", str(mine), "--host", "127.0.0.1", "--port", str(port))
    try:
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=10).status_code == 200
        active = _active(env)
        assert "my_own_dag" in active and "example_etl" in active
        ran = run_cli(env, "dags", "trigger", "my_own_dag", "--wait", "--json")
        assert ran.returncode == 0, ran.stderr
        assert json.loads(ran.stdout)["state"] == "success"
    finally:
        assert stop_component(proc) == 0
    banner = " ".join(log.read_text().split())
    assert f"DAGs from {mine} and the bundled examples:" in banner
    assert f"http://127.0.0.1:{port}/" in banner

    proc = _start(env, log, "--dags-folder", str(mine), "--no-examples", "--port", str(port))
    try:
        assert _active(env) == {"my_own_dag"}
    finally:
        assert stop_component(proc) == 0
    assert f"DAGs from {mine}: 1 DAGs" in " ".join(log.read_text().split())


@pytest.mark.parametrize("db_backend", ["sqlite"])
def test_a_bad_port_is_refused_naming_the_option(env: dict[str, str]) -> None:
    done = run_cli(env, "standalone", "--port", "70000")
    assert done.returncode == 1
    assert "option --port: api_port must be a TCP port (1-65535), got 70000" in " ".join(
        done.stderr.split()
    )


@pytest.mark.parametrize("db_backend", ["sqlite"])
def test_config_says_where_load_examples_comes_from(env: dict[str, str]) -> None:
    shown = json.loads(run_cli(env, "config", "--json").stdout)["settings"]["load_examples"]
    assert shown == {"value": False, "source": "default"}
    env = {**env, "TAILRACE_LOAD_EXAMPLES": "true"}
    shown = json.loads(run_cli(env, "config", "--json").stdout)["settings"]["load_examples"]
    assert shown == {"value": True, "source": "TAILRACE_LOAD_EXAMPLES"}
