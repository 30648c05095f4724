"""`tailrace hitl` as a user runs it: a real scheduler and triggerer, a HITL task waiting
in the triggerer, its request listed and shown, refused responses named plainly, and the
response given from the terminal followed by the branch it chose."""

from __future__ import annotations

import json
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select

from tailrace.db.models import TaskInstance
from tailrace.testing import component_env, run_cli, start_component, stop_components, wait_for

DAGS = """
from datetime import datetime, timedelta
from tailrace import EmptyOperator, HITLBranchOperator, HITLOperator, Param, dag


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def cli_hitl():
    pick = HITLBranchOperator(
        task_id="pick",
        subject="Which region serves the launch?",
        body="Both are ready.",
        options=["eu", "us"],
        params={
            "reason": Param("", type="string"),
            "replicas": Param(1, type="integer", minimum=1),
        },
    )
    pick >> [EmptyOperator(task_id="eu"), EmptyOperator(task_id="us")]
    EmptyOperator(task_id="plain")
    HITLOperator(
        task_id="late", subject="Anyone?", options=["yes"],
        response_timeout=timedelta(seconds=1),
    )


cli_hitl()
"""

RUN = "launch_1"


@pytest.fixture
def env(database_url: str, dags_folder: Path, tmp_path: Path) -> dict[str, str]:
    (dags_folder / "hitl.py").write_text(textwrap.dedent(DAGS))
    return {
        **component_env(database_url, dags_folder, worker_processes=2),
        "TAILRACE_HOME": str(tmp_path / "home"),
        "COLUMNS": "80",
    }


@pytest.fixture
def running(env: dict[str, str]) -> Iterator[None]:
    procs: list[subprocess.Popen[str]] = []
    try:
        procs.append(start_component(env, "triggerer"))
        procs.append(start_component(env, "scheduler"))
        yield
    finally:
        stop_components(procs)


def _json(env: dict[str, str], *args: str) -> Any:
    out = run_cli(env, *args, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _refused(env: dict[str, str], *args: str) -> str:
    out = run_cli(env, "hitl", "respond", "cli_hitl", RUN, *args)
    assert out.returncode == 1, out.stdout
    assert "Traceback" not in out.stderr
    return " ".join(out.stderr.split())  # unwrapped


def _states(engine: Engine) -> dict[str, str | None]:
    with engine.connect() as conn:
        rows = conn.execute(select(TaskInstance.task_id, TaskInstance.state)).all()
    return {task_id: state for task_id, state in rows}


def test_a_request_is_listed_shown_refused_plainly_and_answered_from_the_terminal(
    env: dict[str, str], running: None, engine: Engine
) -> None:
    assert run_cli(env, "dags", "trigger", "cli_hitl", "--run-id", RUN).returncode == 0

    def waiting() -> list[dict[str, Any]]:
        pending = _json(env, "hitl", "list", "--pending")
        return [r for r in pending if r["task_id"] == "pick"]

    [request] = wait_for(waiting, timeout=60)
    assert request["options"] == ["eu", "us"] and request["task_instance_state"] == "deferred"
    # The timed-out request without defaults failed its task, unanswered.
    assert wait_for(lambda: _states(engine).get("late") == "failed", timeout=60)

    table = run_cli(env, "hitl", "list")
    assert table.returncode == 0, table.stderr
    assert all(len(line) <= 80 for line in table.stdout.splitlines()), table.stdout
    assert "launch_1" in table.stdout and "waiting" in table.stdout
    assert "not waiting" in table.stdout  # late

    shown = run_cli(env, "hitl", "show", "cli_hitl", RUN, "pick")
    assert shown.returncode == 0, shown.stderr
    for said in ("Which region serves the launch?", "Both are ready.", "Options: eu, us"):
        assert said in shown.stdout
    assert "replicas" in shown.stdout and "Status: waiting" in shown.stdout

    where = "of DAG 'cli_hitl', run 'launch_1'"
    assert f"There is no task 'nowhere' {where}" in _refused(env, "nowhere", "--option", "eu")
    assert "has asked nothing" in _refused(env, "plain", "--option", "eu")
    assert "no longer waits for a response: it is failed" in _refused(
        env, "late", "--option", "yes"
    )
    unknown = _refused(env, "pick", "--option", "asia")
    assert "Responses ['asia'] are not among the options ['eu', 'us']" in unknown
    assert f"task 'pick' {where}" in unknown
    assert "Only one option may be chosen" in _refused(
        env, "pick", "--option", "eu", "--option", "us"
    )
    assert "params_input 'replicas': 0 does not match the schema" in _refused(
        env, "pick", "--option", "eu", "--param", "replicas=0"
    )
    assert f"pick' {where} has no such param; its params are ['reason', 'replicas']" in _refused(
        env, "pick", "--option", "eu", "--param", "zone=x"
    )
    assert "--params-json is not JSON" in _refused(
        env, "pick", "--option", "eu", "--params-json", "{reason"
    )
    assert _json(env, "hitl", "show", "cli_hitl", RUN, "pick")["response_received"] is False

    answer = _json(
        env, "hitl", "respond", "cli_hitl", RUN, "pick",
        "--option", "eu", "--param", "reason=closest to most users", "--param", "replicas=3",
        "--user", "ops",
    )  # fmt: skip
    assert answer["chosen_options"] == ["eu"] and answer["responded_by"] == "ops"
    assert answer["params_input"] == {"reason": "closest to most users", "replicas": 3}
    assert "already answered: ['eu'] by ops" in _refused(env, "pick", "--option", "us")

    def branched() -> dict[str, str | None] | None:
        # The chosen branch runs, the other is skipped (eu runs after pick: wait for it).
        states = _states(engine)
        done = states["pick"] == "success" and states["eu"] in ("success", "failed")
        return states if done and states["us"] == "skipped" else None

    assert wait_for(branched, timeout=60)["eu"] == "success"
    shown = run_cli(env, "hitl", "show", "cli_hitl", RUN, "pick")
    assert "Status: answered" in shown.stdout and "Response: eu by ops" in shown.stdout
    answered = _json(env, "hitl", "list", "--dag-id", "cli_hitl")
    assert sorted((r["task_id"], r["response_received"]) for r in answered) == [
        ("late", False),
        ("pick", True),
    ]
    assert _json(env, "hitl", "list", "--dag-id", "nothing") == []
