"""@task.virtualenv and PythonVirtualenvOperator, run by real workers: the callable runs
in a virtualenv with a package the workers do not have, its arguments and return value
cross as JSON, the environment is built once and reused, and a Python that is not
installed is refused by name."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import pytest

from tailrace.sdk.errors import DagDefinitionError, UnsupportedArgumentError
from tailrace.testing import DagHarness

WriteDag = Callable[[str, str], Path]

SOURCE = """
from datetime import datetime
from tailrace import PythonVirtualenvOperator, dag, task

CACHE = {cache!r}
Rows = int
Text = dict


def shout(word):
    import humanize  # only in the virtualenv

    return word.upper() + " " + humanize.intcomma(1000000)


@dag(schedule=None, start_date=datetime(2026, 1, 1), params={{"n": 1234567}})
def venv_dag():
    @task.virtualenv(requirements=["humanize"], system_site_packages=False, venv_cache_path=CACHE)
    def describe(n: Rows, ds=None, params=None) -> Text:  # names the virtualenv lacks
        import humanize

        return {{"text": humanize.intcomma(n), "ds": ds, "from_params": params["n"]}}

    @task
    def check(result):
        try:
            import humanize  # noqa: F401
        except ImportError:
            return result
        raise RuntimeError("humanize is installed for the workers: the test proves nothing")

    check(describe(1234567))
    PythonVirtualenvOperator(
        task_id="classic",
        python_callable=shout,
        op_args=["hello"],
        requirements="humanize",
        system_site_packages=False,
        venv_cache_path=CACHE,
    )


venv_dag()


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def venv_old_python():
    PythonVirtualenvOperator(
        task_id="ancient", python_callable=shout, op_args=["x"], python_version="2.4",
        venv_cache_path=CACHE,
    )


venv_old_python()
"""


@pytest.fixture
def venv_dags(harness: DagHarness, write_dag: WriteDag, tmp_path: Path) -> Path:
    cache = tmp_path / "venvs"
    write_dag("venv_dag.py", SOURCE.format(cache=str(cache)))
    assert harness.parse().import_errors == 0
    return cache


def test_a_task_uses_a_package_only_its_virtualenv_has_and_the_env_is_reused(
    harness: DagHarness, venv_dags: Path
) -> None:
    assert importlib.util.find_spec("humanize") is None, "humanize must not be installed here"
    first_pk = harness.trigger("venv_dag")
    assert harness.run(first_pk, timeout=300)["state"] == "success"
    ds = harness.summary(first_pk)["logical_date"][:10]
    assert harness.xcom(first_pk, "check") == {
        "text": "1,234,567",
        "ds": ds,
        "from_params": 1234567,
    }
    assert harness.xcom(first_pk, "classic") == "HELLO 1,000,000"
    # One environment for both tasks (the same requirements), built once.
    assert len([p for p in venv_dags.iterdir() if p.is_dir()]) == 1
    built = harness.log(first_pk, "describe") + harness.log(first_pk, "classic")
    assert built.count("Created virtualenv") == 1 and built.count("Reusing virtualenv") == 1

    second = harness.trigger("venv_dag")
    assert harness.run(second, timeout=300)["state"] == "success"
    assert "Reusing virtualenv" in harness.log(second, "describe")


def test_a_python_version_that_is_not_installed_is_refused_by_name(
    harness: DagHarness, venv_dags: Path
) -> None:
    run = harness.trigger("venv_old_python")
    assert harness.run(run, timeout=120)["state"] == "failed"
    log = harness.log(run, "ancient")
    assert "python_version='2.4' is not installed on this worker" in log
    assert "no working python2.4 on PATH" in log


def test_what_airflow_takes_and_tailrace_does_not_is_refused_at_parse() -> None:
    from tailrace import DAG, task
    from tailrace.sdk.operators.python import PythonVirtualenvOperator

    def f() -> int:
        return 1

    with DAG("refusals"):
        with pytest.raises(UnsupportedArgumentError, match="serializer"):
            PythonVirtualenvOperator(task_id="a", python_callable=f, serializer="dill")
        with pytest.raises(UnsupportedArgumentError, match="expect_airflow"):
            PythonVirtualenvOperator(task_id="b", python_callable=f, expect_airflow=True)
        PythonVirtualenvOperator(task_id="b2", python_callable=f, expect_airflow=False)
        with pytest.raises(DagDefinitionError, match="python_version must be a string"):
            PythonVirtualenvOperator(task_id="c", python_callable=f, python_version=3.9)  # type: ignore[arg-type]
        with pytest.raises(DagDefinitionError, match="cannot be read"):
            PythonVirtualenvOperator(task_id="d", python_callable=print)
        assert callable(task.virtualenv)
