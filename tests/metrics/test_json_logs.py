"""``log_format = "json"``: one JSON object a line, naming the try a line belongs to."""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tailrace.metrics import logs
from tailrace.testing import run_cli, start_component, stop_component, wait_for
from tailrace.testing._browser import free_port

WriteDag = Callable[[str, str], Path]


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(logs.ContextFilter())
    handler.setFormatter(logs.JsonFormatter("scheduler"))
    logger = logging.getLogger("tailrace.test.json")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_line_inside_a_try_names_it(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    logger.info("outside")
    with logs.task_context(logs.TaskLogContext("etl", "manual__1", "load", 3, 2)):
        logger.warning("inside %s", "the try")
    outside, inside = lines(stream)
    assert outside["message"] == "outside"
    assert "dag_id" not in outside
    assert outside["component"] == "scheduler"
    assert outside["pid"] == os.getpid()
    assert inside["message"] == "inside the try"
    assert inside["level"] == "WARNING"
    assert (inside["dag_id"], inside["run_id"], inside["task_id"]) == ("etl", "manual__1", "load")
    assert (inside["map_index"], inside["try_number"]) == (3, 2)


def test_extra_names_the_task_and_exceptions_keep_their_traceback(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = captured
    logger.info("run finished", extra={"dag_id": "etl", "run_id": "r1"})
    try:
        raise ValueError("bad row")
    except ValueError:
        logger.exception("failed")
    finished, failed = lines(stream)
    assert (finished["dag_id"], finished["run_id"]) == ("etl", "r1")
    assert "ValueError: bad row" in failed["exception"]


def test_a_recording_span_puts_its_trace_and_span_ids_on_the_line(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
    tracer = sdk_trace.TracerProvider().get_tracer("test")
    logger, stream = captured
    with tracer.start_as_current_span("work") as span:
        logger.info("traced")
        ids = span.get_span_context()
    logger.info("untraced")
    traced, untraced = lines(stream)
    assert traced["trace_id"] == f"{ids.trace_id:032x}"
    assert traced["span_id"] == f"{ids.span_id:016x}"
    assert "trace_id" not in untraced


DAG = """
import asyncio
import logging
from datetime import datetime

from tailrace import BaseOperator, BaseTrigger, TriggerEvent, dag, task


class Wait(BaseTrigger):
    def serialize(self):
        return (f"{__name__}.Wait", {})

    async def run(self):
        logging.getLogger("airflow.task").info("trigger says hello")
        yield TriggerEvent({"ok": True})


class Deferring(BaseOperator):
    def execute(self, context):
        self.defer(trigger=Wait(), method_name="done")

    def done(self, context, event):
        return event


@task
def talk():
    logging.getLogger("airflow.task").info("task says hello")
    print("printed too")


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def chatty():
    talk() >> Deferring(task_id="deferring")


chatty()
"""


@pytest.mark.slow
@pytest.mark.parametrize("db_backend", ["sqlite"])
def test_standalone_in_json_writes_every_line_as_json_with_its_try(
    database_url: str, dags_folder: Path, write_dag: WriteDag, tmp_path: Path
) -> None:
    write_dag("chatty.py", DAG)
    output = tmp_path / "out.txt"
    env = {
        **os.environ,
        "TAILRACE_DATABASE_URL": database_url,
        "TAILRACE_DAGS_FOLDER": str(dags_folder),
        "TAILRACE_WORKER_PROCESSES": "2",
        "TAILRACE_LOG_FORMAT": "json",
        "TAILRACE_DAGS_ARE_PAUSED_AT_CREATION": "false",
        "TAILRACE_API_PORT": str(free_port()),
        "COLUMNS": "200",
    }
    proc = start_component(env, "standalone", "--no-examples", output=output)
    try:
        ran = run_cli(env, "dags", "trigger", "chatty", "--wait", "--timeout", "120")
        assert ran.returncode == 0, ran.stdout + ran.stderr

        def events() -> list[dict[str, Any]] | None:
            found = [
                json.loads(line) for line in output.read_text().splitlines() if line.startswith("{")
            ]
            said = {e["message"] for e in found}
            wanted = {"task says hello", "trigger says hello"}
            return found if wanted <= said else None

        found = wait_for(events, timeout=30)
    finally:
        assert stop_component(proc) == 0
    by_message = {e["message"]: e for e in found}
    task_line = by_message["task says hello"]
    assert (task_line["dag_id"], task_line["task_id"], task_line["try_number"]) == (
        "chatty",
        "talk",
        1,
    )
    assert task_line["run_id"].startswith("manual__")
    assert task_line["component"] == "worker"
    assert by_message["printed too"]["task_id"] == "talk"
    trigger_line = by_message["trigger says hello"]
    assert (trigger_line["task_id"], trigger_line["component"]) == ("deferring", "standalone")
    finished = [e for e in found if e["message"].endswith("finished: success")]
    assert finished and finished[0]["run_id"] == task_line["run_id"]
    # Every line the logging system wrote is JSON (the CLI's own banner is not a log line).
    logged = [line for line in output.read_text().splitlines() if '"level"' in line]
    assert all(line.startswith("{") for line in logged)
