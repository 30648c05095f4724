"""TriggerDagRunOperator and ExternalTaskSensor: their waiting is in the triggerer, and
they end as Airflow's do."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import select

from tailrace.db.models import DagRun
from tailrace.testing import DagHarness, wait_for

WriteDag = Callable[[str, str], Path]

TARGET = """
from datetime import datetime
from tailrace import dag, task

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def target():
    @task
    def work(dag_run=None):
        if dag_run.conf.get("fail"):
            raise ValueError("asked to fail")
        return dag_run.conf.get("n")

    work()

target()
"""

CONTROLLER = """
from datetime import datetime
from tailrace import TriggerDagRunOperator, dag

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def controller():
    TriggerDagRunOperator(
        task_id="kick",
        trigger_dag_id="target",
        trigger_run_id="from_controller_{{ dag_run.conf.get('fail', False) }}",
        conf={"n": 7, "fail": "{{ dag_run.conf.get('fail', '') }}"},
        wait_for_completion=True,
        poke_interval=0.2,
    )

controller()
"""

WATCHER = """
from datetime import datetime
from tailrace import ExternalTaskSensor, dag

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def watcher():
    ExternalTaskSensor(
        task_id="wait_for_work",
        external_dag_id="target",
        external_task_id="work",
        failed_states=["failed"],
        poll_interval=0.2,
        timeout=60,
    )

watcher()
"""


def test_trigger_dag_run_waits_in_the_triggerer_for_the_run_it_made(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag("target.py", TARGET)
    write_dag("controller.py", CONTROLLER)
    harness.parse()
    pk = harness.trigger("controller")
    assert harness.run(pk)["state"] == "success"
    with harness.engine.connect() as conn:
        run = conn.execute(
            select(DagRun.id, DagRun.state, DagRun.conf).where(
                DagRun.dag_id == "target", DagRun.run_id == "from_controller_False"
            )
        ).one()
    assert run.state == "success" and run.conf == {"n": 7, "fail": ""}
    assert harness.xcom(run.id, "work") == 7
    assert harness.xcom(pk, "kick", key="trigger_run_id") == "from_controller_False"
    # The wait held no worker: the task went to one to start and to judge the event.
    assert "Deferring to tailrace.cross_dag.TriggerDagRunTrigger" in harness.log(pk, "kick")
    failing = harness.trigger("controller", conf={"fail": True})
    assert harness.run(failing)["state"] == "failed"
    assert "target run from_controller_True ended failed" in harness.log(failing, "kick")


def test_external_task_sensor_waits_for_the_task_at_its_logical_date(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag("target.py", TARGET)
    write_dag("watcher.py", WATCHER)
    harness.parse()
    when = datetime(2026, 3, 1, tzinfo=UTC)
    other = datetime(2026, 3, 2, tzinfo=UTC)
    with harness.running():
        watching = harness.trigger("watcher", logical_date=when)
        # The sensor waits in the triggerer until target has that run and it succeeded.
        wait_for(lambda: harness.task_instance(watching, "wait_for_work").state == "deferred")
        target = harness.trigger("target", logical_date=when, conf={"n": 1})
        failed_target = harness.trigger("target", logical_date=other, conf={"fail": True})
        failed_watch = harness.trigger("watcher", logical_date=other)
        runs = (watching, target, failed_target, failed_watch)
        wait_for(lambda: all(harness.is_finished(pk) for pk in runs))
    assert [harness.summary(pk)["state"] for pk in runs] == [
        "success",
        "success",
        "failed",
        "failed",
    ]
    assert harness.states(failed_watch) == {"wait_for_work": "failed"}
    assert "reached a failed state" in harness.log(failed_watch, "wait_for_work")
