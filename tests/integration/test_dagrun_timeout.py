"""dagrun_timeout end to end, as in Airflow: a run still unfinished when its timeout
passes fails, its unfinished task instances are skipped (a running try is stopped, a
deferred one's trigger cancelled), and its DAG's on_failure_callback gets "timed_out"."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from sqlalchemy import select

from tailrace.db.models import TaskInstance, Trigger
from tailrace.testing import DagHarness, FakeClock

WriteDag = Callable[[str, str], Path]


def test_a_run_past_its_timeout_fails_and_skips_what_is_unfinished(
    clocked: DagHarness, clock: FakeClock, write_dag: WriteDag, tmp_path: Path
) -> None:
    harness = clocked
    started = tmp_path / "started"
    never = tmp_path / "never-created"
    out = tmp_path / "callback.json"
    write_dag(
        "timeout_dag.py",
        f"""
import json, os, time
from datetime import datetime, timedelta
from tailrace import dag, task
from tailrace.sdk.operators.empty import EmptyOperator
from tailrace.sdk.sensors import DateTimeSensorAsync


def alert(context):
    with open({str(out)!r}, "w") as f:
        json.dump({{"reason": context["reason"], "run_id": context["run_id"]}}, f)


@dag(
    schedule=None,
    start_date=datetime(2026, 1, 1),
    dagrun_timeout=timedelta(hours=1),
    on_failure_callback=alert,
)
def timeout_dag():
    @task
    def quick():
        return 1

    @task
    def stuck():
        open({str(started)!r}, "w").close()
        # Waits for a file the test never creates: only the run's timeout ends it.
        while not os.path.exists({str(never)!r}):
            time.sleep(0.05)

    waits = DateTimeSensorAsync(task_id="waits", target_time=datetime(2099, 1, 1))
    quick() >> stuck() >> EmptyOperator(task_id="after")
    waits


timeout_dag()
""",
    )
    harness.parse()
    pk = harness.trigger("timeout_dag")
    harness.start()
    # Let it get going: the first task done, the second running, the sensor deferred.
    assert harness.scheduler.run_until(
        lambda: started.exists() and harness.states(pk)["waits"] == "deferred", timeout=60
    )
    assert harness.states(pk)["quick"] == "success"
    clock.advance(timedelta(hours=1, seconds=1))
    harness.scheduler.wake()
    summary = harness.run(pk)
    assert summary["state"] == "failed"
    assert harness.states(pk) == {
        "quick": "success",
        "stuck": "skipped",
        "after": "skipped",
        "waits": "skipped",
    }
    [callback] = harness.dag_callbacks(pk)
    assert (callback["reason"], callback["state"]) == ("timed_out", "success")
    assert json.loads(out.read_text()) == {"reason": "timed_out", "run_id": summary["run_id"]}
    with harness.engine.connect() as conn:
        trigger_id = conn.scalar(
            select(TaskInstance.trigger_id).where(
                TaskInstance.dag_run_id == pk, TaskInstance.task_id == "waits"
            )
        )
    # The deferred sensor's trigger was cancelled.
    assert trigger_id is not None and _completed(harness, trigger_id)
    # The stuck try's worker was stopped: its late report changed nothing.
    log = harness.log(pk, "stuck")
    assert "its run timed out" in log
    assert harness.states(pk)["stuck"] == "skipped"


def _completed(harness: DagHarness, trigger_id: int) -> bool:
    with harness.engine.connect() as conn:
        return bool(conn.scalar(select(Trigger.completed).where(Trigger.id == trigger_id)))


def test_a_run_that_ends_in_time_is_not_touched(harness: DagHarness, write_dag: WriteDag) -> None:
    write_dag(
        "in_time.py",
        """
from datetime import timedelta
from tailrace import DAG
from tailrace.sdk.operators.empty import EmptyOperator

with DAG("in_time", dagrun_timeout=timedelta(hours=1)):
    EmptyOperator(task_id="a") >> EmptyOperator(task_id="b")
""",
    )
    harness.parse()
    pk = harness.trigger("in_time")
    assert harness.run(pk)["state"] == "success"
    assert harness.states(pk) == {"a": "success", "b": "success"}
    assert harness.dag_callbacks(pk) == []
