"""DAG runs end to end: parser process, scheduler, worker processes, real database."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import Engine

from tailrace.dag_processing import ParseOptions
from tailrace.dagfiles import module_name
from tailrace.testing import DagHarness

WriteDag = Callable[[str, str], Path]

HEADER = """
from datetime import datetime, timedelta
from tailrace import DAG, dag, task, Param, TaskGroup, chain
from tailrace.sdk.operators.python import PythonOperator
from tailrace.sdk.operators.bash import BashOperator
from tailrace.sdk.operators.empty import EmptyOperator
START = datetime(2026, 1, 1)
"""


def test_taskflow_values_flow_downstream_and_prints_reach_the_log(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    dag_file = write_dag(
        "etl.py",
        HEADER
        + """
@dag(schedule=None, start_date=START)
def etl():
    @task
    def extract():
        return [1, 2, 3]

    @task
    def transform(values):
        return [v * 10 for v in values]

    @task
    def load(values):
        print("loading", values)
        return sum(values)

    load(transform(extract()))

etl()
""",
    )
    assert harness.parse().dags == 1
    pk = harness.trigger("etl")
    summary = harness.run(pk)
    assert summary["state"] == "success"
    assert harness.states(pk) == {"extract": "success", "transform": "success", "load": "success"}
    assert "loading [10, 20, 30]" in harness.log(pk, "load")
    # The DAG file was imported by the parser and the workers, never by the scheduler.
    assert module_name(str(dag_file.resolve())) not in sys.modules


def test_failure_retries_then_fails_and_downstream_is_upstream_failed(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag(
        "flaky.py",
        HEADER
        + """
with DAG("flaky", schedule=None, start_date=START) as d:
    def boom():
        raise ValueError("the source is down")

    a = PythonOperator(task_id="a", python_callable=boom, retries=1, retry_delay=timedelta(0))
    b = EmptyOperator(task_id="b")
    cleanup = EmptyOperator(task_id="cleanup", trigger_rule="all_done")
    alert = EmptyOperator(task_id="alert", trigger_rule="one_failed")
    a >> [b, cleanup, alert]
""",
    )
    harness.parse()
    pk = harness.trigger("flaky")
    summary = harness.run(pk)
    assert summary["state"] == "failed"
    states = harness.states(pk)
    assert states == {
        "a": "failed",
        "b": "upstream_failed",
        "cleanup": "success",
        "alert": "success",
    }
    a = next(ti for ti in summary["task_instances"] if ti["task_id"] == "a")
    assert a["try_number"] == 2
    assert "ValueError: the source is down" in a["error"]
    assert "ValueError: the source is down" in harness.log(pk, "a", try_number=1)
    assert "ValueError: the source is down" in harness.log(pk, "a", try_number=2)


def test_skip_and_fail_signals(harness: DagHarness, write_dag: WriteDag) -> None:
    write_dag(
        "signals.py",
        HEADER
        + """
from tailrace import SkipTask, FailTask

@dag(schedule=None, start_date=START)
def signals():
    @task
    def skipper():
        raise SkipTask("nothing to do today")

    @task(retries=3)
    def hard_fail():
        raise FailTask("bad credentials: retrying will not help")

    @task
    def after_skip():
        return 1

    skipper() >> after_skip()
    hard_fail()

signals()
""",
    )
    harness.parse()
    pk = harness.trigger("signals")
    summary = harness.run(pk)
    assert harness.states(pk) == {
        "skipper": "skipped",
        "hard_fail": "failed",
        "after_skip": "skipped",
    }
    hard = next(ti for ti in summary["task_instances"] if ti["task_id"] == "hard_fail")
    assert hard["try_number"] == 1


def test_branch_and_short_circuit(harness: DagHarness, write_dag: WriteDag) -> None:
    write_dag(
        "branchy.py",
        HEADER
        + """
@dag(schedule=None, start_date=START)
def branchy():
    @task.branch
    def choose():
        return "left"

    left = EmptyOperator(task_id="left")
    right = EmptyOperator(task_id="right")
    join = EmptyOperator(task_id="join", trigger_rule="none_failed_min_one_success")

    @task.short_circuit
    def gate():
        return False

    after_gate = EmptyOperator(task_id="after_gate")
    far = EmptyOperator(task_id="far", trigger_rule="all_done")

    choose() >> [left, right] >> join >> gate() >> after_gate >> far

branchy()
""",
    )
    harness.parse()
    pk = harness.trigger("branchy")
    harness.run(pk)
    assert harness.states(pk) == {
        "choose": "success",
        "left": "success",
        "right": "skipped",
        "join": "success",
        "gate": "success",
        "after_gate": "skipped",
        "far": "skipped",
    }


def test_classic_mapping_expands_and_reduces_in_order(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag(
        "mapped.py",
        HEADER
        + """
@dag(schedule=None, start_date=START)
def mapped():
    @task
    def numbers():
        return [3, 1, 4, 1, 5]

    @task
    def square(n, offset):
        return n * n + offset

    @task
    def collect(values):
        return list(values)

    @task
    def nothing():
        return []

    collect(square.partial(offset=1).expand(n=numbers()))
    square.override(task_id="never").partial(offset=0).expand(n=nothing())

mapped()
""",
    )
    harness.parse()
    pk = harness.trigger("mapped")
    summary = harness.run(pk)
    assert summary["state"] == "success"
    states = harness.states(pk)
    assert [states[f"square[{i}]"] for i in range(5)] == ["success"] * 5
    assert states["never"] == "skipped"

    assert harness.xcom(pk, "collect") == [10, 2, 17, 2, 26]


def test_params_and_conf_reach_templates_and_invalid_conf_is_refused(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    import pytest

    from tailrace.errors import ConfValidationError

    write_dag(
        "params.py",
        HEADER
        + """
with DAG(
    "params_dag",
    schedule=None,
    start_date=START,
    params={"count": Param(2, type="integer", minimum=1)},
) as d:
    BashOperator(task_id="echo", bash_command="echo count={{ params.count }} run={{ run_id }}")
""",
    )
    harness.parse()
    pk = harness.trigger("params_dag", {"count": 7})
    assert harness.run(pk)["state"] == "success"
    assert "count=7 run=manual__" in harness.log(pk, "echo")
    with pytest.raises(ConfValidationError, match=r"param 'count' of DAG 'params_dag'.*minimum"):
        harness.trigger("params_dag", {"count": 0})


def test_execution_timeout_fails_the_task(harness: DagHarness, write_dag: WriteDag) -> None:
    write_dag(
        "slow.py",
        HEADER
        + """
import threading

@dag(schedule=None, start_date=START)
def slow():
    @task(execution_timeout=timedelta(seconds=0.5))
    def forever():
        threading.Event().wait()

    forever()

slow()
""",
    )
    harness.parse()
    pk = harness.trigger("slow")
    summary = harness.run(pk)
    assert summary["state"] == "failed"
    (ti,) = summary["task_instances"]
    assert "exceeded its execution_timeout of 0.5s" in ti["error"]


def test_max_active_tasks_limits_concurrency(harness: DagHarness, write_dag: WriteDag) -> None:
    write_dag(
        "serial.py",
        HEADER
        + """
@dag(schedule=None, start_date=START, max_active_tasks=1)
def serial():
    @task
    def work(i):
        return i

    for i in range(4):
        work.override(task_id=f"w{i}")(i)

serial()
""",
    )
    harness.parse()
    pk = harness.trigger("serial")
    summary = harness.run(pk)
    assert summary["state"] == "success"
    spans = sorted((ti["start_date"], ti["end_date"]) for ti in summary["task_instances"])
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert end <= start, f"tasks overlapped: {spans}"


def test_mapped_instances_beyond_the_free_slots_run_once_each_as_slots_free(
    engine: Engine, dags_folder: Path, tmp_path: Path, write_dag: WriteDag
) -> None:
    # A step reads one more unstarted instance than can start: with 3 slots, 40
    # instances go a few at a time, each exactly once, none left waiting.
    write_dag(
        "narrow.py",
        HEADER
        + """
@dag(schedule=None, start_date=START, max_active_tasks=40)
def narrow():
    @task
    def square(n):
        return n * n

    @task
    def total(values):
        return sum(values)

    total(square.expand(n=list(range(40))))

narrow()
""",
    )
    options = ParseOptions(paused_at_creation=False)
    with DagHarness(
        engine, dags_folder, log_folder=tmp_path / "logs", parallelism=3, parse_options=options
    ) as h:
        h.parse()
        pk = h.trigger("narrow")
        assert h.run(pk)["state"] == "success"
        assert h.xcom(pk, "total") == sum(n * n for n in range(40))
        assert len(h.dispatched) == len(set(h.dispatched)) == 41
