"""Metric values, read back the way Prometheus reads them: from the text exposition of
every process's files (the scheduler here, the worker processes it started)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine, select

from tailrace import metrics, transitions
from tailrace.clock import utcnow
from tailrace.db.models import TaskInstance
from tailrace.testing import DagHarness

WriteDag = Callable[[str, str], Path]

DAGS = """
from datetime import datetime

from tailrace import BaseOperator, BaseTrigger, StartTriggerArgs, TriggerEvent, dag, task


class Pages(BaseTrigger):
    def __init__(self, count):
        super().__init__()
        self.count = count

    def serialize(self):
        return (f"{__name__}.Pages", {"count": self.count})

    async def run(self):
        for i in range(self.count):
            yield TriggerEvent({"n": i})


class Stream(BaseOperator):
    start_from_trigger = True
    start_trigger_args = StartTriggerArgs(
        trigger_cls=f"{__name__}.Pages", trigger_kwargs={"count": 5}
    )

    def execute(self, context):
        raise AssertionError("starts in the triggerer")


@task
def double(item):
    return item["n"] * 2


@task
def boom():
    raise ValueError("no")


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def metered():
    double.iterate(item=Stream(task_id="pages", max_pending_events=2).output)


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def failing():
    boom()


metered()
failing()
"""


@pytest.fixture
def recording(tmp_path: Path) -> Iterator[Path]:
    """Metrics on in this process (and the workers it starts) for the test."""
    directory = tmp_path / "metrics"
    directory.mkdir()
    metrics.activate(directory)
    try:
        yield directory
    finally:
        metrics.deactivate()
        os.environ.pop(metrics.DIRECTORY_VARIABLE, None)


def samples(directory: Path) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = metrics.render(directory).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(directory: Path, name: str, **labels: str) -> float:
    return samples(directory).get((name, frozenset(labels.items())), 0.0)


def test_a_run_counts_finishes_durations_and_the_loop(
    recording: Path, harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag("metered.py", DAGS)
    harness.parse()
    assert harness.trigger_and_run("failing")["state"] == "failed"
    m = recording

    assert value(m, "tailrace_ti_finish_total", dag_id="failing", task_id="boom", state="failed")
    assert value(m, "tailrace_ti_failures_total") == 1
    assert value(m, "tailrace_ti_successes_total") == 0
    assert value(m, "tailrace_dagrun_duration_seconds_count", dag_id="failing", state="failed")
    assert value(m, "tailrace_scheduler_scheduler_loop_duration_seconds_count") >= 1
    # Recorded by the worker process that ran the try, not by this one.
    assert value(m, "tailrace_task_duration_seconds_count", dag_id="failing", task_id="boom") == 1
    assert value(m, "tailrace_executor_open_slots") == harness.executor.processes


def test_a_stream_counts_events_produced_and_acknowledged_and_instances(
    recording: Path, harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag("metered.py", DAGS)
    harness.parse()
    assert harness.trigger_and_run("metered")["state"] == "success"
    m = recording
    stream = {"dag_id": "metered", "task_id": "pages"}

    assert value(m, "tailrace_stream_events_produced_total", **stream) == 5
    assert value(m, "tailrace_stream_events_acknowledged_total", **stream) == 5
    assert value(m, "tailrace_stream_event_ack_lag_seconds_count", **stream) >= 1
    # Two events ahead of five instances to run: the pager waited at least once.
    assert value(m, "tailrace_stream_backpressure_pauses_total", **stream) >= 1
    assert value(m, "tailrace_triggers_succeeded_total") == 1
    assert value(m, "tailrace_triggers_failed_total") == 0
    double = {"dag_id": "metered", "task_id": "double"}
    assert value(m, "tailrace_iterate_instances_created_total", **double) == 5
    assert value(m, "tailrace_iterate_expansion_pass_instances_sum", **double) == 5
    assert value(m, "tailrace_ti_finish_total", state="success", **double) == 5
    assert value(m, "tailrace_task_duration_seconds_count", **double) == 5


def test_a_transition_that_rolls_back_is_not_counted(
    recording: Path, harness: DagHarness, write_dag: WriteDag, engine: Engine
) -> None:
    write_dag("metered.py", DAGS)
    harness.parse()
    harness.trigger_and_run("failing")
    with engine.connect() as conn:
        ti_id = conn.scalar(select(TaskInstance.id).where(TaskInstance.task_id == "boom"))
    assert ti_id is not None
    marked = {"dag_id": "failing", "task_id": "boom", "state": "success"}

    class Undo(Exception):
        pass

    with pytest.raises(Undo), engine.begin() as conn:
        transitions.mark(conn, [ti_id], "success", utcnow())
        raise Undo
    assert value(recording, "tailrace_ti_finish_total", **marked) == 0

    with engine.begin() as conn:
        transitions.mark(conn, [ti_id], "success", utcnow())
    assert value(recording, "tailrace_ti_finish_total", **marked) == 1


def test_off_means_no_op_instruments_and_no_hook(tmp_path: Path) -> None:
    assert not metrics.get().enabled
    assert metrics.directory() is None
    # Recording while off neither fails nor writes anything anywhere.
    metrics.get().ti_finish.labels("d", "t", "success").inc()
    metrics.get().scheduler_loop_duration.observe(0.1)
    directory = tmp_path / "m"
    directory.mkdir()
    metrics.activate(directory)
    metrics.deactivate()
    os.environ.pop(metrics.DIRECTORY_VARIABLE, None)
    assert "tailrace_ti_finish_total" not in metrics.render(directory).decode()
