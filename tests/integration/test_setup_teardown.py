"""Setup and teardown tasks with Airflow's semantics: the teardown runs after failed work,
does not decide the run's state unless on_failure_fail_dagrun, a failed setup stops its
work and teardown, and clearing a work task clears its setup and teardown."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tailrace import DAG, BashOperator, EmptyOperator, setup, task, teardown
from tailrace.dagrun import clear_task_instances
from tailrace.sdk.errors import DagDefinitionError
from tailrace.serialization import serialize_dag
from tailrace.testing import DagHarness

WriteDag = Callable[[str, str], Path]

DAG_FILE = """
from datetime import datetime
from tailrace import BashOperator, dag, setup, task, teardown

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def {dag_id}():
    @setup
    def create_cluster():
        {setup_body}

    @task
    def work(cluster):
        {work_body}

    @teardown{teardown_args}
    def delete_cluster(cluster):
        {teardown_body}

    cluster = create_cluster()
    work(cluster) >> delete_cluster(cluster)

{dag_id}()
"""


def _dag(
    dag_id: str,
    *,
    setup_body: str = "return 'c-1'",
    work_body: str = "return cluster",
    teardown_body: str = "return 'deleted ' + cluster",
    teardown_args: str = "",
) -> str:
    return DAG_FILE.format(
        dag_id=dag_id,
        setup_body=setup_body,
        work_body=work_body,
        teardown_body=teardown_body,
        teardown_args=teardown_args,
    )


def test_the_teardown_runs_after_failed_work_and_the_run_fails_by_its_work(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag("st_fail.py", _dag("st_fail", work_body="raise ValueError('query failed')"))
    harness.parse()
    pk = harness.trigger("st_fail")
    assert harness.run(pk)["state"] == "failed"
    assert harness.states(pk) == {
        "create_cluster": "success",
        "work": "failed",
        "delete_cluster": "success",
    }
    assert harness.xcom(pk, "delete_cluster") == "deleted c-1"


def test_a_failed_teardown_does_not_fail_the_run_unless_asked(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    failing = "raise RuntimeError('cannot delete')"
    write_dag("st_quiet.py", _dag("st_quiet", teardown_body=failing))
    write_dag(
        "st_loud.py",
        _dag("st_loud", teardown_body=failing, teardown_args="(on_failure_fail_dagrun=True)"),
    )
    harness.parse()
    quiet = harness.trigger("st_quiet")
    assert harness.run(quiet)["state"] == "success"
    assert harness.states(quiet)["delete_cluster"] == "failed"
    loud = harness.trigger("st_loud")
    assert harness.run(loud)["state"] == "failed"
    assert harness.states(loud) == {
        "create_cluster": "success",
        "work": "success",
        "delete_cluster": "failed",
    }


def test_a_failed_setup_stops_its_work_and_its_teardown(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag("st_setup.py", _dag("st_setup", setup_body="raise RuntimeError('no capacity')"))
    harness.parse()
    pk = harness.trigger("st_setup")
    assert harness.run(pk)["state"] == "failed"
    assert harness.states(pk) == {
        "create_cluster": "failed",
        "work": "upstream_failed",
        "delete_cluster": "upstream_failed",
    }


def test_clearing_a_work_task_clears_its_setup_and_teardown(
    harness: DagHarness, write_dag: WriteDag, tmp_path: Path
) -> None:
    flag = tmp_path / "fixed"
    write_dag(
        "st_clear.py",
        _dag(
            "st_clear",
            work_body=f"import os; assert os.path.exists({str(flag)!r}), 'not yet'; return 1",
        ),
    )
    harness.parse()
    pk = harness.trigger("st_clear")
    assert harness.run(pk)["state"] == "failed"
    flag.touch()
    with harness.engine.begin() as conn:
        cleared = clear_task_instances(conn, pk, ["work"], harness.clock(), only_failed=True)
    assert cleared == 3
    assert set(harness.states(pk).values()) == {None}
    assert harness.run(pk)["state"] == "success"
    assert harness.task_instance(pk, "create_cluster").try_number == 2
    assert harness.task_instance(pk, "delete_cluster").try_number == 2


def test_operators_as_setup_as_teardown_and_a_with_block() -> None:
    with DAG("st_ops", schedule=None) as dag:
        create = BashOperator(task_id="create", bash_command="echo c")
        delete = BashOperator(task_id="delete", bash_command="echo d").as_teardown(setups=create)
        with delete:
            a = EmptyOperator(task_id="a")
            b = EmptyOperator(task_id="b")
            a >> b
    assert create.is_setup and delete.is_teardown
    assert str(delete.trigger_rule) == "all_done_setup_success"
    assert create.downstream_task_ids == {"delete", "a"}
    assert b.downstream_task_ids == {"delete"} and a.downstream_task_ids == {"b"}
    serialized = {t.task_id: t for t in serialize_dag(dag).tasks}
    assert serialized["create"].is_setup and serialized["delete"].is_teardown


def test_a_teardown_keeps_its_trigger_rule_and_a_task_is_not_both() -> None:
    with DAG("st_bad", schedule=None) as dag:
        t = EmptyOperator(task_id="t").as_teardown()
        t.trigger_rule = "all_success"  # type: ignore[assignment]
    with pytest.raises(DagDefinitionError, match="Teardown task 't' has trigger_rule"):
        serialize_dag(dag)
    with DAG("st_both", schedule=None) as dag:
        EmptyOperator(task_id="x").as_setup().as_teardown()
    with pytest.raises(DagDefinitionError, match="both setup and teardown"):
        serialize_dag(dag)
    with (
        DAG("st_plain", schedule=None),
        pytest.raises(DagDefinitionError, match="context"),
        EmptyOperator(task_id="plain"),
    ):
        pass


def test_setup_and_teardown_decorate_task_variants() -> None:
    with DAG("st_deco", schedule=None):

        @setup
        @task.bash
        def start() -> str:
            return "echo start"

        @teardown(on_failure_fail_dagrun=True)
        def stop() -> None:
            pass

        s = start()
        s >> stop().as_teardown(setups=s)
    assert s.operator.is_setup  # type: ignore[attr-defined]
    assert type(s.operator).__name__ == "_BashDecoratedOperator"  # type: ignore[attr-defined]
