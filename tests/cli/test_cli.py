"""The `tailrace` command as a user runs it: real processes, real database."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tailrace.testing import run_cli, start_component, stop_component, wait_for

GOOD = """
from datetime import datetime
from tailrace import dag, task

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def cli_good():
    @task
    def one():
        return 1

    @task
    def two(x):
        print("got", x)
        return x + 1

    two(one())

cli_good()
"""

BAD_TASK = """
from datetime import datetime
from tailrace import dag, task

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def cli_bad():
    @task
    def explode():
        raise RuntimeError("kaboom from the task")

    explode()

cli_bad()
"""


@pytest.fixture
def cli_env(database_url: str, tmp_path: Path) -> dict[str, str]:
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "good.py").write_text(textwrap.dedent(GOOD))
    (dags / "bad.py").write_text(textwrap.dedent(BAD_TASK))
    (dags / "broken.py").write_text("from tailrace import DAG\nDAG(\n")
    return {
        **os.environ,
        "TAILRACE_DATABASE_URL": database_url,
        "TAILRACE_DAGS_FOLDER": str(dags),
        "TAILRACE_WORKER_PROCESSES": "2",
        "COLUMNS": "200",
    }


def test_dags_test_exits_zero_on_success_and_one_with_the_traceback_on_failure(
    cli_env: dict[str, str],
) -> None:
    ok = run_cli(cli_env, "dags", "test", "cli_good")
    assert ok.returncode == 0, ok.stderr
    assert "success" in ok.stdout
    bad = run_cli(cli_env, "dags", "test", "cli_bad")
    assert bad.returncode == 1
    assert "RuntimeError: kaboom from the task" in bad.stderr


def test_import_errors_are_listed_with_file_and_line(cli_env: dict[str, str]) -> None:
    out = run_cli(cli_env, "dags", "list-import-errors", "--json")
    errors = json.loads(out.stdout)
    assert [(Path(e["filename"]).name, e["line"]) for e in errors] == [("broken.py", 2)]
    listing = json.loads(run_cli(cli_env, "dags", "list", "--json").stdout)
    assert {d["dag_id"] for d in listing} == {"cli_good", "cli_bad"}


def test_unknown_dag_and_bad_conf_get_one_clear_line(cli_env: dict[str, str]) -> None:
    missing = run_cli(cli_env, "dags", "trigger", "nope")
    assert missing.returncode == 1
    assert "DAG 'nope' is not known" in missing.stderr
    assert "Traceback" not in missing.stderr
    conf = run_cli(cli_env, "dags", "trigger", "cli_good", "--conf", "[1, 2]")
    assert conf.returncode == 1
    assert "--conf must be a JSON object" in conf.stderr
    # A conf over max_payload_bytes is refused here as the API refuses it (413).
    env = {**cli_env, "TAILRACE_MAX_PAYLOAD_BYTES": "1024"}
    big = run_cli(env, "dags", "trigger", "cli_good", "--conf", '{"x": "%s"}' % ("y" * 2000))
    assert big.returncode == 1
    assert "over the limit of 1,024 (max_payload_bytes)" in big.stderr
    assert "Traceback" not in big.stderr


@pytest.fixture
def scheduler(cli_env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    proc = start_component(cli_env, "scheduler")
    yield proc
    assert stop_component(proc) == 0


def test_trigger_wait_json_reports_every_task_instance(
    cli_env: dict[str, str], scheduler: subprocess.Popen[str]
) -> None:
    out = run_cli(cli_env, "dags", "trigger", "cli_good", "--wait", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["state"] == "success"
    assert [
        (t["task_id"], t["map_index"], t["state"], t["try_number"])
        for t in report["task_instances"]
    ] == [
        ("one", -1, "success", 1),
        ("two", -1, "success", 1),
    ]
    for ti in report["task_instances"]:
        assert ti["queued_at"] <= ti["start_date"] <= ti["end_date"]

    failed = run_cli(cli_env, "dags", "trigger", "cli_bad", "--wait", "--json")
    assert failed.returncode == 1
    assert json.loads(failed.stdout)["state"] == "failed"


WIDE = """
from datetime import datetime
from tailrace import dag, task

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def cli_wide():
    @task
    def work(n):
        return n

    work.expand(n=list(range(30)))

cli_wide()
"""


def test_trigger_json_summarises_a_mapped_task_unless_asked_for_every_instance(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "dags" / "wide.py").write_text(textwrap.dedent(WIDE))
    out = run_cli(cli_env, "dags", "test", "cli_wide", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    listed = [t["map_index"] for t in report["task_instances"] if t["task_id"] == "work"]
    assert listed == list(range(25))
    assert report["mapped"] == {"work": {"instances": 30, "states": {"success": 30}}}

    out = run_cli(cli_env, "dags", "test", "cli_wide", "--json", "--all-instances")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    listed = [t["map_index"] for t in report["task_instances"] if t["task_id"] == "work"]
    assert listed == list(range(30)) and "mapped" not in report

    refused = run_cli(cli_env, "dags", "trigger", "cli_wide", "--all-instances")
    assert refused.returncode == 1
    assert "--all-instances applies to --json output" in refused.stderr


def test_config_masks_secrets(cli_env: dict[str, str]) -> None:
    env = {**cli_env, "TAILRACE_DATABASE_URL": "postgresql://bob:hunter2@db.example/tr"}
    out = run_cli(env, "config", "--json")
    assert out.returncode == 0, out.stderr
    assert "hunter2" not in out.stdout
    assert "bob" in out.stdout


def test_tasks_test_runs_one_task_here(cli_env: dict[str, str]) -> None:
    out = run_cli(cli_env, "tasks", "test", "cli_good", "two", "--xcom", "one=41")
    assert out.returncode == 0, out.stderr
    assert "XCom return_value = 42" in out.stdout


HANGS_ON_FIRST_TRY = """
import threading
from datetime import datetime, timedelta
from tailrace import dag, task, get_current_context

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def cli_crash():
    @task(retries=1, retry_delay=timedelta(0))
    def survive():
        if get_current_context()["ti"].try_number == 1:
            threading.Event().wait()
        return "ok"

    survive()

cli_crash()
"""


def test_a_scheduler_killed_mid_run_leaves_nothing_running_forever(
    cli_env: dict[str, str], database_url: str
) -> None:
    from sqlalchemy import select

    from tailrace.db import create_engine
    from tailrace.db.models import DagRun, TaskInstance, TaskInstanceHistory

    Path(cli_env["TAILRACE_DAGS_FOLDER"], "crash.py").write_text(
        textwrap.dedent(HANGS_ON_FIRST_TRY)
    )
    env = {**cli_env, "TAILRACE_SCHEDULER_POLL_INTERVAL": "0.3"}
    engine = create_engine(database_url)
    first = start_component(env, "scheduler")
    try:
        assert run_cli(env, "dags", "trigger", "cli_crash").returncode == 0

        def state() -> str | None:
            with engine.connect() as conn:
                return conn.scalar(
                    select(TaskInstance.state).where(TaskInstance.task_id == "survive")
                )

        wait_for(lambda: state() == "running")
    finally:
        # The whole machine goes: scheduler, its workers and the hanging task.
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        assert first.stdout is not None
        first.stdout.close()
    assert state() == "running"

    second = start_component(env, "scheduler")
    try:

        def run_state() -> str | None:
            with engine.connect() as conn:
                return conn.scalar(select(DagRun.state).where(DagRun.dag_id == "cli_crash"))

        wait_for(lambda: run_state() == "success")
        with engine.connect() as conn:
            ti = conn.execute(select(TaskInstance).where(TaskInstance.task_id == "survive")).one()
            lost = conn.execute(
                select(TaskInstanceHistory).where(TaskInstanceHistory.try_number == 1)
            ).one()
        assert ti.try_number == 2
        assert lost.state == "failed"
        assert "stopped heartbeating" in lost.error
    finally:
        assert stop_component(second) == 0
        engine.dispose()


def test_tasks_clear_and_mark_change_state_and_refuse_bad_input(
    cli_env: dict[str, str], database_url: str
) -> None:
    from sqlalchemy import select

    from tailrace.db import create_engine
    from tailrace.db.models import DagRun, TaskInstance

    assert run_cli(cli_env, "dags", "test", "cli_good").returncode == 0
    cleared = run_cli(cli_env, "tasks", "clear", "cli_good", "--task-id", "two")
    assert cleared.returncode == 0, cleared.stderr
    assert "Cleared 1 task instances of cli_good" in cleared.stdout
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            assert (
                conn.scalar(select(TaskInstance.state).where(TaskInstance.task_id == "two")) is None
            )
            assert conn.scalar(select(DagRun.state)) == "queued"
        marked = run_cli(cli_env, "tasks", "mark", "cli_good", "two", "--state", "success")
        assert marked.returncode == 0, marked.stderr
        with engine.connect() as conn:
            assert (
                conn.scalar(select(TaskInstance.state).where(TaskInstance.task_id == "two"))
                == "success"
            )
    finally:
        engine.dispose()
    bogus = run_cli(cli_env, "tasks", "mark", "cli_good", "two", "--state", "done")
    assert bogus.returncode == 1
    assert "--state must be success, failed or skipped" in bogus.stderr
    missing = run_cli(cli_env, "tasks", "clear", "no_such_dag")
    assert missing.returncode == 1
    assert "DAG 'no_such_dag' has no runs" in missing.stderr
