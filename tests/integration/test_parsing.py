"""Broken DAG files are reported precisely, and every other DAG keeps working."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sqlalchemy import select

from tailrace.db.models import Dag, DagVersion, ImportError_
from tailrace.testing import DagHarness

WriteDag = Callable[[str, str], Path]

GOOD = """
from datetime import datetime
from tailrace import dag, task

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def good():
    @task
    def hello():
        return "hi"
    hello()

good()
"""


def import_errors(harness: DagHarness) -> dict[str, ImportError_]:
    with harness.engine.connect() as conn:
        rows = conn.execute(select(ImportError_)).all()
    return {Path(r.filename).name: r for r in rows}


def test_each_kind_of_broken_file_is_reported_and_good_dags_still_run(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag("good_dag.py", GOOD)
    write_dag("syntax_dag.py", "from tailrace import DAG\n\ndef broken(:\n    pass\n")
    write_dag("import_dag.py", "from tailrace import DAG\nimport no_such_module_anywhere\n")
    write_dag(
        "cycle_dag.py",
        """
from datetime import datetime
from tailrace import DAG
from tailrace.sdk.operators.empty import EmptyOperator
with DAG("cyclic", schedule=None, start_date=datetime(2026, 1, 1)):
    a = EmptyOperator(task_id="a")
    b = EmptyOperator(task_id="b")
    a >> b >> a
""",
    )
    write_dag(
        "dup_dag.py",
        """
from datetime import datetime
from tailrace import DAG
from tailrace.sdk.operators.empty import EmptyOperator
with DAG("dups", schedule=None, start_date=datetime(2026, 1, 1)):
    EmptyOperator(task_id="same")
    EmptyOperator(task_id="same")
""",
    )
    write_dag(
        "cron_dag.py",
        """
from datetime import datetime
from tailrace import DAG
with DAG("bad_cron", schedule="61 * * * *", start_date=datetime(2026, 1, 1)):
    pass
""",
    )
    write_dag(
        "rule_dag.py",
        """
from datetime import datetime
from tailrace import DAG
from tailrace.sdk.operators.empty import EmptyOperator
with DAG("bad_rule", schedule=None, start_date=datetime(2026, 1, 1)):
    EmptyOperator(task_id="t", trigger_rule="sometimes")
""",
    )
    write_dag(
        "param_dag.py",
        """
from datetime import datetime
from tailrace import DAG, Param
with DAG(
    "bad_param",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    params={"n": Param("seven", type="integer")},
):
    pass
""",
    )
    report = harness.parse()
    assert report.dags == 1
    errors = import_errors(harness)
    assert set(errors) == {
        "syntax_dag.py",
        "import_dag.py",
        "cycle_dag.py",
        "dup_dag.py",
        "cron_dag.py",
        "rule_dag.py",
        "param_dag.py",
    }
    assert errors["syntax_dag.py"].line == 3
    assert "SyntaxError" in errors["syntax_dag.py"].message
    assert errors["import_dag.py"].line == 2
    assert "no_such_module_anywhere" in errors["import_dag.py"].message
    assert errors["cycle_dag.py"].dag_id == "cyclic"
    assert "cycle" in errors["cycle_dag.py"].message.lower()
    assert errors["dup_dag.py"].task_id == "same"
    assert "dups" in errors["dup_dag.py"].message
    assert errors["dup_dag.py"].line == 7
    assert "61 * * * *" in errors["cron_dag.py"].message
    assert "sometimes" in errors["rule_dag.py"].message
    assert errors["rule_dag.py"].task_id == "t"
    assert "'n'" in errors["param_dag.py"].message or errors["param_dag.py"].message == "n"
    assert harness.trigger_and_run("good")["state"] == "success"


def test_fixing_a_file_clears_its_error_and_a_change_makes_a_new_version(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    path = write_dag("good_dag.py", "this is not a python dag")
    harness.parse()
    assert "good_dag.py" in import_errors(harness)
    path.write_text(GOOD)
    harness.parse()
    assert import_errors(harness) == {}
    harness.parse()
    path.write_text(GOOD.replace('return "hi"', 'return "hello"'))
    harness.parse()
    with harness.engine.connect() as conn:
        versions = conn.scalars(
            select(DagVersion.version_number).where(DagVersion.dag_id == "good")
        ).all()
    # The unchanged re-parse made no version; the edited task body made one.
    assert sorted(versions) == [1, 2]


def test_a_deleted_file_deactivates_its_dags(harness: DagHarness, write_dag: WriteDag) -> None:
    path = write_dag("good_dag.py", GOOD)
    harness.parse()
    path.unlink()
    harness.parse()
    with harness.engine.connect() as conn:
        assert conn.scalar(select(Dag.is_active).where(Dag.dag_id == "good")) is False


def test_a_dag_file_that_hangs_at_import_times_out_alone(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    from tailrace.dag_processing import parse_in_subprocess

    write_dag("good_dag.py", GOOD)
    write_dag("hang_dag.py", "import threading\nthreading.Event().wait()  # dag\n")
    results = {Path(r.path).name: r for r in parse_in_subprocess(harness.dags_folder, timeout=1)}
    assert list(results["good_dag.py"].dags) == ["good"]
    assert "took longer than 1s" in results["hang_dag.py"].errors[0].message
