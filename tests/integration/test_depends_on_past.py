"""depends_on_past and wait_for_downstream across two runs, as in Airflow: a task waits
(unscheduled) until its instance in the previous run succeeded or was skipped — and with
wait_for_downstream, that instance's direct downstream ones too — and runs as soon as a
fix of the previous run lets it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tailrace.dagrun import clear_task_instances
from tailrace.testing import DagHarness

WriteDag = Callable[[str, str], Path]

SOURCE = """
import os
from datetime import datetime
from tailrace import dag, task

OK = {ok!r}


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def {dag_id}():
    @task({first_args})
    def first():
        {first_body}

    @task
    def second():
        {second_body}

    @task
    def independent():
        return 1

    first() >> second()
    independent()


{dag_id}()
"""

FAILS_UNTIL_OK = 'if not os.path.exists(OK): raise RuntimeError("not yet")'


def _clear(harness: DagHarness, pk: int, task_id: str) -> None:
    with harness.engine.begin() as conn:
        clear_task_instances(conn, pk, [task_id], harness.clock())
    harness.scheduler.wake()


def _until(harness: DagHarness, condition: Callable[[], bool]) -> None:
    assert harness.scheduler.run_until(condition, timeout=60)


def test_depends_on_past_waits_for_the_previous_runs_instance(
    harness: DagHarness, write_dag: WriteDag, tmp_path: Path
) -> None:
    ok = tmp_path / "ok"
    write_dag(
        "past.py",
        SOURCE.format(
            ok=str(ok),
            dag_id="past",
            first_args="depends_on_past=True",
            first_body=FAILS_UNTIL_OK,
            second_body="return 2",
        ),
    )
    harness.parse()
    first_run = harness.trigger("past")
    assert harness.run(first_run)["state"] == "failed"
    second_run = harness.trigger("past")
    # The second run goes on with what does not depend on the past...
    _until(harness, lambda: harness.states(second_run)["independent"] == "success")
    # ... while `first` waits: its previous instance failed.
    assert harness.states(second_run)["first"] is None
    ok.touch()
    _clear(harness, first_run, "first")
    assert harness.run(second_run)["state"] == "success"
    assert harness.states(first_run)["first"] == "success"
    assert harness.states(second_run) == {
        "first": "success",
        "second": "success",
        "independent": "success",
    }


def test_wait_for_downstream_waits_for_the_previous_runs_downstream_too(
    harness: DagHarness, write_dag: WriteDag, tmp_path: Path
) -> None:
    ok = tmp_path / "ok"
    write_dag(
        "past_down.py",
        SOURCE.format(
            ok=str(ok),
            dag_id="past_down",
            first_args="wait_for_downstream=True",
            first_body="return 1",
            second_body=FAILS_UNTIL_OK,
        ),
    )
    harness.parse()
    first_run = harness.trigger("past_down")
    assert harness.run(first_run)["state"] == "failed"
    assert harness.states(first_run)["first"] == "success"
    second_run = harness.trigger("past_down")
    _until(harness, lambda: harness.states(second_run)["independent"] == "success")
    # `first` succeeded last time, but its downstream `second` failed: it waits.
    assert harness.states(second_run)["first"] is None
    ok.touch()
    _clear(harness, first_run, "second")
    assert harness.run(second_run)["state"] == "success"
    assert harness.states(first_run)["second"] == "success"
