"""Task callbacks end to end: real workers call them with the task's context, by the
state the try leaves the task in; arguments Tailrace cannot honour are import errors."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import select

from tailrace.db.models import ImportError_
from tailrace.testing import DagHarness, run_cli

WriteDag = Callable[[str, str], Path]

HEADER = """
import json
from datetime import UTC, datetime, timedelta
from tailrace import BaseOperator, FailTask, SkipTask, dag, defer, task
from tailrace.sdk.triggers import DateTimeTrigger

START = datetime(2026, 1, 1)
OUT = {out!r}


def record(kind):
    def callback(context):
        exc = context.get("exception")
        with open(OUT, "a") as f:
            f.write(json.dumps({{
                "kind": kind,
                "task": context["ti"].task_id,
                "try": context["ti"].try_number,
                "exception": None if exc is None else f"{{type(exc).__name__}}: {{exc}}",
                "keys": sorted(context),
                "run_id": context["run_id"],
            }}) + "\\n")
    return callback


ALL = dict(
    on_execute_callback=record("execute"),
    on_success_callback=record("success"),
    on_failure_callback=record("failure"),
    on_retry_callback=record("retry"),
    on_skipped_callback=record("skipped"),
)
"""


def calls(out: Path, task_id: str | None = None) -> list[dict[str, Any]]:
    if not out.exists():
        return []
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return [r for r in rows if task_id is None or r["task"] == task_id]


def kinds(out: Path, task_id: str) -> list[tuple[str, int, str | None]]:
    return [(r["kind"], r["try"], r["exception"]) for r in calls(out, task_id)]


def test_success_calls_execute_then_success_with_the_tasks_context(
    harness: DagHarness, write_dag: WriteDag, tmp_path: Path
) -> None:
    out = tmp_path / "calls.jsonl"
    write_dag(
        "cb_success.py",
        HEADER.format(out=str(out))
        + """
@dag(schedule=None, start_date=START)
def cb_success():
    @task(**{**ALL, "on_success_callback": [record("success"), record("success 2")]})
    def works():
        with open(OUT, "a") as f:
            f.write(json.dumps({"kind": "body", "task": "works", "try": 1,
                                "exception": None, "keys": []}) + "\\n")
        return 1

    works()

cb_success()
""",
    )
    harness.parse()
    pk = harness.trigger("cb_success")
    assert harness.run(pk)["state"] == "success"
    assert kinds(out, "works") == [
        ("execute", 1, None),
        ("body", 1, None),
        ("success", 1, None),
        ("success 2", 1, None),
    ]
    success = calls(out, "works")[2]
    assert {"dag", "dag_run", "params", "task", "ti", "logical_date"} <= set(success["keys"])
    assert "exception" not in success["keys"]


def test_a_failed_try_calls_retry_then_the_last_calls_failure_with_the_exception(
    harness: DagHarness, write_dag: WriteDag, tmp_path: Path
) -> None:
    out = tmp_path / "calls.jsonl"
    write_dag(
        "cb_fail.py",
        HEADER.format(out=str(out))
        + """
@dag(schedule=None, start_date=START, default_args=ALL)
def cb_fail():
    @task(retries=1, retry_delay=timedelta(0))
    def flaky():
        raise ValueError("the source is down")

    @task(retries=3, retry_delay=timedelta(0))
    def hopeless():
        raise FailTask("bad credentials")

    flaky()
    hopeless()

cb_fail()
""",
    )
    harness.parse()
    pk = harness.trigger("cb_fail")
    assert harness.run(pk)["state"] == "failed"
    assert harness.states(pk) == {"flaky": "failed", "hopeless": "failed"}
    assert kinds(out, "flaky") == [
        ("execute", 1, None),
        ("retry", 1, "ValueError: the source is down"),
        ("execute", 2, None),
        ("failure", 2, "ValueError: the source is down"),
    ]
    # FailTask never retries, whatever retries says: straight to the failure callback.
    assert kinds(out, "hopeless") == [
        ("execute", 1, None),
        ("failure", 1, "FailTask: bad credentials"),
    ]


def test_a_skip_calls_the_skipped_callback(
    harness: DagHarness, write_dag: WriteDag, tmp_path: Path
) -> None:
    out = tmp_path / "calls.jsonl"
    write_dag(
        "cb_skip.py",
        HEADER.format(out=str(out))
        + """
@dag(schedule=None, start_date=START, default_args=ALL)
def cb_skip():
    @task
    def nothing_today():
        raise SkipTask("no data")

    nothing_today()

cb_skip()
""",
    )
    harness.parse()
    pk = harness.trigger("cb_skip")
    harness.run(pk)
    assert harness.states(pk) == {"nothing_today": "skipped"}
    assert kinds(out, "nothing_today") == [("execute", 1, None), ("skipped", 1, None)]


def test_a_callback_that_raises_is_logged_and_changes_nothing(
    harness: DagHarness, write_dag: WriteDag, tmp_path: Path
) -> None:
    out = tmp_path / "calls.jsonl"
    write_dag(
        "cb_raises.py",
        HEADER.format(out=str(out))
        + """
def broken(context):
    raise RuntimeError("the alerting webhook is down")

@dag(schedule=None, start_date=START)
def cb_raises():
    @task(on_execute_callback=broken, on_success_callback=[broken, record("success")])
    def works():
        return 42

    works()

cb_raises()
""",
    )
    harness.parse()
    pk = harness.trigger("cb_raises")
    assert harness.run(pk)["state"] == "success"
    assert harness.xcom(pk, "works") == 42
    # The list goes on after the callback that raised.
    assert kinds(out, "works") == [("success", 1, None)]
    log = harness.log(pk, "works")
    assert "on_execute_callback #1 (broken) raised" in log
    assert "on_success_callback #1 (broken) raised" in log
    assert log.count("RuntimeError: the alerting webhook is down") == 2


def test_a_deferred_task_calls_success_once_when_its_try_really_ends(
    harness: DagHarness, write_dag: WriteDag, tmp_path: Path
) -> None:
    out = tmp_path / "calls.jsonl"
    write_dag(
        "cb_defer.py",
        HEADER.format(out=str(out))
        + """
@dag(schedule=None, start_date=START, default_args=ALL)
def cb_defer():
    @task
    def waits(event=None):
        if event is None:
            defer(DateTimeTrigger(datetime.now(UTC) + timedelta(seconds=0.05)))
        return "done"

    waits()

cb_defer()
""",
    )
    harness.parse()
    pk = harness.trigger("cb_defer")
    assert harness.run(pk)["state"] == "success"
    # As in Airflow, on_execute_callback runs each time the task's code starts (the
    # resume too); the try ends once, with one success callback.
    assert kinds(out, "waits") == [
        ("execute", 1, None),
        ("execute", 1, None),
        ("success", 1, None),
    ]


REFUSED = """
from datetime import datetime, timedelta
from tailrace import dag, task

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def ported():
    @task(sla=timedelta(hours=1))
    def load():
        return 1

    load()

ported()
"""


def test_an_argument_tailrace_would_ignore_is_an_import_error(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag("ported.py", REFUSED)
    report = harness.parse()
    assert (report.dags, report.import_errors) == (0, 1)
    with harness.engine.connect() as conn:
        (error,) = conn.execute(select(ImportError_)).all()
    assert (
        "DAG 'ported', task 'load': sla=datetime.timedelta(seconds=3600) is not supported"
        in error.message
    )


def test_list_import_errors_names_the_dag_task_and_argument(
    database_url: str, tmp_path: Path
) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "ported.py").write_text(REFUSED)
    env = {
        **os.environ,
        "TAILRACE_HOME": str(tmp_path / "home"),
        "TAILRACE_DATABASE_URL": database_url,
        "TAILRACE_DAGS_FOLDER": str(dags),
        "COLUMNS": "200",
    }
    out = run_cli(env, "dags", "list-import-errors", "--json")
    assert out.returncode == 1, out.stderr  # there are import errors
    [error] = json.loads(out.stdout)
    assert Path(error["filename"]).name == "ported.py"
    assert "DAG 'ported', task 'load': sla=datetime.timedelta(seconds=3600)" in error["message"]
    assert "Remove it" in error["message"]
