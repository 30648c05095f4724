"""@task.external_python / ExternalPythonOperator and the branch_ variants of it and of
@task.virtualenv, run by real workers: the callable runs in a second, real interpreter
(a virtualenv made once per session, without Tailrace or its dependencies), its return
value feeds a downstream task, a branch's choice skips the other branch, an exit code
in skip_on_exit_code skips the task, and a bad python path is an error naming the DAG,
the task and the path."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from tailrace.db.models import ImportError_
from tailrace.sdk.errors import DagDefinitionError, UnsupportedArgumentError
from tailrace.testing import DagHarness

WriteDag = Callable[[str, str], Path]


@pytest.fixture(scope="session")
def other_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second interpreter: a bare virtualenv (no pip, no site packages)."""
    venv = tmp_path_factory.mktemp("external_python") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    return venv / "bin" / "python"


SOURCE = """
from datetime import datetime
from tailrace import BranchExternalPythonOperator, EmptyOperator, ExternalPythonOperator, dag, task

PYTHON = {python!r}
CACHE = {cache!r}


def where_am_i(greeting):
    import sys

    return {{"greeting": greeting, "prefix": sys.prefix, "strings": virtualenv_string_args}}


def pick(params=None):
    return "classic_" + params["pick"]


@dag(schedule=None, start_date=datetime(2026, 1, 1), params={{"python": PYTHON}})
def external_dag():
    @task.external_python(python=PYTHON, templates_dict={{"day": "{{{{ ds }}}}"}})
    def inspect_interpreter(n: int, ds=None, templates_dict=None) -> dict:
        import importlib.util
        import sys

        return {{
            "double": n * 2,
            "prefix": sys.prefix,
            "has_msgspec": importlib.util.find_spec("msgspec") is not None,
            "same_day": templates_dict["day"] == ds,
        }}

    @task
    def report(result):
        return result

    report(inspect_interpreter(21))
    ExternalPythonOperator(
        task_id="classic",
        python="{{{{ params.python }}}}",  # templated
        python_callable=where_am_i,
        op_kwargs={{"greeting": "hello"}},
        string_args=["one", "two\\nthree"],
    )


external_dag()


@dag(schedule=None, start_date=datetime(2026, 1, 1), params={{"pick": "right"}})
def external_branches():
    @task.branch_external_python(python=PYTHON)
    def choose(params=None):
        return params["pick"]

    @task.branch_virtualenv(system_site_packages=False, venv_cache_path=CACHE)
    def choose_in_venv(params=None):
        return "venv_" + params["pick"]

    def two(prefix):
        return [EmptyOperator(task_id=prefix + "left"), EmptyOperator(task_id=prefix + "right")]

    join = EmptyOperator(task_id="join", trigger_rule="none_failed_min_one_success")
    choose() >> two("") >> join
    join >> choose_in_venv() >> two("venv_")
    classic = BranchExternalPythonOperator(task_id="classic", python=PYTHON, python_callable=pick)
    join >> classic >> two("classic_")


external_branches()


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def external_exits():
    @task.external_python(python=PYTHON, skip_on_exit_code=[3, 5])
    def leave(code: int):
        import sys

        sys.exit(code)

    leave.override(task_id="skipped")(3) >> EmptyOperator(task_id="after_skipped")
    leave.override(task_id="failed")(4)


external_exits()


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def external_missing():
    @task.external_python(python="/no/such/venv/bin/python")
    def nothing():
        return 1

    nothing()


external_missing()
"""


@pytest.fixture
def external_dags(
    harness: DagHarness, write_dag: WriteDag, other_python: Path, tmp_path: Path
) -> Path:
    write_dag(
        "external_dag.py", SOURCE.format(python=str(other_python), cache=str(tmp_path / "venvs"))
    )
    assert harness.parse().import_errors == 0
    return other_python


def test_a_task_runs_in_the_given_interpreter_and_its_value_is_used_downstream(
    harness: DagHarness, external_dags: Path
) -> None:
    run = harness.trigger("external_dag")
    assert harness.run(run, timeout=120)["state"] == "success"
    prefix = str(external_dags.parent.parent)
    assert harness.xcom(run, "report") == {
        "double": 42,
        "prefix": prefix,
        "has_msgspec": False,  # Tailrace and its dependencies are not there
        "same_day": True,
    }
    assert harness.xcom(run, "classic") == {
        "greeting": "hello",
        "prefix": prefix,
        "strings": ["one", "two", "three"],
    }


def test_a_branch_in_another_interpreter_or_a_virtualenv_skips_the_other_branch(
    harness: DagHarness, external_dags: Path
) -> None:
    run = harness.trigger("external_branches")
    assert harness.run(run, timeout=300)["state"] == "success"
    assert harness.states(run) == {
        "choose": "success",
        "left": "skipped",
        "right": "success",
        "join": "success",
        "choose_in_venv": "success",
        "venv_left": "skipped",
        "venv_right": "success",
        "classic": "success",
        "classic_left": "skipped",
        "classic_right": "success",
    }
    assert harness.xcom(run, "choose_in_venv") == "venv_right"


def test_an_exit_code_in_skip_on_exit_code_skips_and_another_fails(
    harness: DagHarness, external_dags: Path
) -> None:
    run = harness.trigger("external_exits")
    assert harness.run(run, timeout=120)["state"] == "failed"
    assert harness.states(run) == {
        "skipped": "skipped",
        "after_skipped": "skipped",
        "failed": "failed",
    }
    assert "exit code 4" in harness.log(run, "failed")


def test_a_python_that_does_not_exist_on_the_worker_fails_naming_dag_task_and_path(
    harness: DagHarness, external_dags: Path
) -> None:
    run = harness.trigger("external_missing")
    assert harness.run(run, timeout=120)["state"] == "failed"
    assert harness.states(run) == {"nothing": "failed"}
    log = harness.log(run, "nothing")
    assert (
        "DAG 'external_missing', task 'nothing': python='/no/such/venv/bin/python' does not "
        "exist on this worker" in log
    )


BAD_PATHS = """
from datetime import datetime
from tailrace import dag, task


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def external_relative():
    @task.external_python(python="venv/bin/python")
    def nothing():
        return 1

    nothing()


external_relative()
"""


def test_a_relative_python_path_is_an_import_error_naming_dag_task_and_path(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag("bad_paths.py", BAD_PATHS)
    assert harness.parse().import_errors == 1
    with harness.engine.connect() as conn:
        error = conn.execute(select(ImportError_)).one()
    assert (error.dag_id, error.task_id) == ("external_relative", "nothing")
    assert "python='venv/bin/python' is not an absolute path" in error.message


def _f() -> int:
    return 1


def _numbers() -> Iterator[int]:
    yield 1


def test_what_tailrace_cannot_honour_is_refused_at_parse_by_name() -> None:
    from tailrace import DAG, ExternalPythonOperator, task

    python = sys.executable
    with DAG("external_refusals"):
        with pytest.raises(DagDefinitionError, match="python must be the path") as caught:
            ExternalPythonOperator(task_id="a", python_callable=_f)
        assert (caught.value.dag_id, caught.value.task_id) == ("external_refusals", "a")
        with pytest.raises(UnsupportedArgumentError, match="expect_airflow"):
            ExternalPythonOperator(
                task_id="b", python=python, python_callable=_f, expect_airflow=True
            )
        with pytest.raises(UnsupportedArgumentError, match="expect_pendulum"):
            ExternalPythonOperator(
                task_id="c", python=python, python_callable=_f, expect_pendulum=True
            )
        with pytest.raises(UnsupportedArgumentError, match="serializer"):
            task.external_python(python=python, serializer="cloudpickle")(_f)()
        with pytest.raises(DagDefinitionError, match="yields"):
            ExternalPythonOperator(task_id="d", python=python, python_callable=_numbers)
        # Airflow's way of saying "Airflow is not installed there" is Tailrace's default.
        ExternalPythonOperator(task_id="e", python=python, python_callable=_f, expect_airflow=False)
