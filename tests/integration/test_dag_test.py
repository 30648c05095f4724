"""dag.test() runs a DAG in this process, following deferrals and streams; `tailrace tasks
test` follows a deferral."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tailrace.dagfiles import load_dag_file
from tailrace.sdk.errors import UnsupportedArgumentError
from tailrace.testing import run_cli

DAG_FILE = """
import os
from datetime import datetime, timedelta
from tailrace import BaseOperator, BaseTrigger, TriggerEvent, Variable, dag, task
from tailrace.sdk.triggers import TimeDeltaTrigger


class Pages(BaseTrigger):
    def __init__(self, pages):
        super().__init__()
        self.pages = pages

    def serialize(self):
        return (f"{__name__}.Pages", {"pages": self.pages})

    async def run(self):
        for page in range(self.pages):
            yield TriggerEvent({"page": page})
        yield TriggerEvent({"page": None})


class Wait(BaseOperator):
    def execute(self, context):
        self.defer(trigger=TimeDeltaTrigger(timedelta(milliseconds=50)), method_name="done")

    def done(self, context, event=None):
        return {"pid": os.getpid(), "region": Variable.get("region")}


class Fetch(BaseOperator):

    def execute(self, context):
        self.defer(trigger=Pages(3), method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):
        for event in events:
            if event.payload["page"] is not None:
                yield event.payload["page"] * 10


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def in_process():
    wait = Wait(task_id="wait")

    @task
    def double(item):
        return item * 2

    @task
    def total(values):
        return sum(values)

    fetched = Fetch(task_id="fetch")
    wait >> fetched
    total(double.iterate(item=fetched.output))


in_process()

if __name__ == "__main__":
    run = in_process().test(variable_file_path=os.environ["VARS"])
    print("STATE", run.state, run.return_values["total"])
"""


@pytest.fixture
def dag_file(tmp_path: Path) -> Path:
    path = tmp_path / "dags" / "in_process.py"
    path.parent.mkdir()
    path.write_text(DAG_FILE)
    return path


def test_dag_test_runs_every_task_in_this_process_following_deferrals_and_streams(
    dag_file: Path, tmp_path: Path
) -> None:
    variables = tmp_path / "vars.json"
    variables.write_text(json.dumps({"region": "eu-west-1"}))
    [dag] = load_dag_file(str(dag_file)).dags.values()
    run = dag.test(variable_file_path=str(variables))
    assert run.state == "success"
    assert run.return_values["wait"] == {"pid": os.getpid(), "region": "eu-west-1"}
    assert run.return_values["total"] == 60  # (0 + 10 + 20) * 2
    assert run.task_states["double[2]"] == "success"
    assert run.task_states["fetch"] == "success"


def test_dag_test_from_the_dag_files_main_block(dag_file: Path, tmp_path: Path) -> None:
    variables = tmp_path / "vars.json"
    variables.write_text(json.dumps({"region": "us"}))
    result = subprocess.run(
        [sys.executable, str(dag_file)],
        env={**os.environ, "VARS": str(variables)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "STATE success 60" in result.stdout
    assert "Deferring to" in result.stderr  # the tasks' logs are printed as they end


def test_dag_test_refuses_what_it_cannot_do(dag_file: Path) -> None:
    [dag] = load_dag_file(str(dag_file)).dags.values()
    with pytest.raises(UnsupportedArgumentError, match="use_executor"):
        dag.test(use_executor=True)
    with pytest.raises(UnsupportedArgumentError, match="mark_success_pattern"):
        dag.test(mark_success_pattern="wait")


def test_tasks_test_follows_a_deferral(dag_file: Path, database_url: str) -> None:
    env = {
        **os.environ,
        "TAILRACE_DATABASE_URL": database_url,
        "TAILRACE_DAGS_FOLDER": str(dag_file.parent),
        "TAILRACE_VAR_REGION": "ap",
    }
    result = run_cli(env, "tasks", "test", "in_process", "wait")
    assert result.returncode == 0, result.stderr
    assert "Task wait: success" in result.stdout
    assert "'region': 'ap'" in result.stdout
