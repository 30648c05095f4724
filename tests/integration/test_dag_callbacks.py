"""DAG callbacks end to end: a finished run's on_success_callback / on_failure_callback
runs in a worker process (never the scheduler's) with the run's context and ``reason``."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tailrace.testing import DagHarness

WriteDag = Callable[[str, str], Path]

HEADER = """
import json, os
from datetime import datetime
from tailrace import DAG, dag, task
from tailrace.sdk.operators.empty import EmptyOperator

OUT = {out!r}


def record(name):
    def callback(context):
        with open(OUT, "a") as f:
            f.write(json.dumps({{
                "callback": name,
                "pid": os.getpid(),
                "reason": context["reason"],
                "run_id": context["run_id"],
                "dag_id": context["dag"].dag_id,
                "state_dag_run": context["dag_run"].run_id,
                "conf": context["conf"],
                "ds": context["ds"],
                "keys": sorted(context),
            }}) + "\\n")
    return callback
"""


def calls(out: Path) -> list[dict[str, Any]]:
    if not out.exists():
        return []
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_a_successful_run_calls_the_dags_success_callbacks_in_a_worker(
    harness: DagHarness, write_dag: WriteDag, tmp_path: Path
) -> None:
    out = tmp_path / "calls.jsonl"
    write_dag(
        "dag_cb_ok.py",
        HEADER.format(out=str(out))
        + """
@dag(
    schedule=None,
    start_date=datetime(2026, 1, 1),
    on_success_callback=[record("success"), record("success 2")],
    on_failure_callback=record("failure"),
)
def dag_cb_ok():
    @task
    def works():
        return 1

    works()


dag_cb_ok()
""",
    )
    harness.parse()
    pk = harness.trigger("dag_cb_ok", {"region": "eu"})
    summary = harness.run(pk)
    assert summary["state"] == "success"
    assert harness.dag_callbacks(pk) == [
        {"kind": "success", "reason": "success", "state": "success", "error": None}
    ]
    first, second = calls(out)
    assert [first["callback"], second["callback"]] == ["success", "success 2"]
    assert first["reason"] == "success"
    assert first["run_id"] == first["state_dag_run"] == summary["run_id"]
    assert (first["dag_id"], first["conf"]) == ("dag_cb_ok", {"region": "eu"})
    assert {"dag", "dag_run", "run_id", "reason", "logical_date", "ds", "params"} <= set(
        first["keys"]
    )
    # A worker ran them: not this process (the scheduler's), but one of the pool's.
    assert first["pid"] != os.getpid()
    assert first["pid"] in harness.executor.worker_pids


def test_a_failed_run_calls_the_failure_callback_and_one_that_raises_is_logged(
    harness: DagHarness, write_dag: WriteDag, tmp_path: Path
) -> None:
    out = tmp_path / "calls.jsonl"
    write_dag(
        "dag_cb_fail.py",
        HEADER.format(out=str(out))
        + """
def broken(context):
    raise RuntimeError("the pager is down")


with DAG(
    "dag_cb_fail",
    on_success_callback=record("success"),
    on_failure_callback=[broken, record("failure")],
):
    @task
    def fails():
        raise ValueError("no data")

    fails() >> EmptyOperator(task_id="after")
""",
    )
    harness.parse()
    pk = harness.trigger("dag_cb_fail")
    summary = harness.run(pk)
    assert summary["state"] == "failed"
    [callback] = harness.dag_callbacks(pk)
    assert (callback["kind"], callback["reason"], callback["state"]) == (
        "failure",
        "task_failure",
        "failed",
    )
    assert "1 of the DAG's on_failure_callback callables raised" in callback["error"]
    # The one that raised did not stop the next.
    assert [(c["callback"], c["reason"]) for c in calls(out)] == [("failure", "task_failure")]
    log = (
        tmp_path
        / "logs"
        / "dag_id=dag_cb_fail"
        / f"run_id={summary['run_id']}"
        / "dag_on_failure_callback.log"
    )
    text = log.read_text()
    assert "RuntimeError: the pager is down" in text
    assert "Running on_failure_callback of DAG dag_cb_fail" in text


def test_a_dag_without_callbacks_records_none(harness: DagHarness, write_dag: WriteDag) -> None:
    write_dag(
        "dag_cb_none.py",
        """
from tailrace import DAG
from tailrace.sdk.operators.empty import EmptyOperator

with DAG("dag_cb_none"):
    EmptyOperator(task_id="only")
""",
    )
    harness.parse()
    pk = harness.trigger("dag_cb_none")
    assert harness.run(pk)["state"] == "success"
    assert harness.dag_callbacks(pk) == []
