"""priority_weight and weight_rule decide which ready task takes a slot when slots are
short, as in Airflow: higher effective weights first."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from tailrace.dag_processing import ParseOptions
from tailrace.testing import DagHarness

WriteDag = Callable[[str, str], Path]


@pytest.fixture
def one_slot(engine: Engine, dags_folder: Path, tmp_path: Path) -> Iterator[DagHarness]:
    options = ParseOptions(paused_at_creation=False)
    with DagHarness(
        engine,
        dags_folder,
        log_folder=tmp_path / "logs",
        processes=1,
        parallelism=1,
        parse_options=options,
    ) as h:
        yield h


def test_with_one_slot_the_heaviest_ready_task_runs_first(
    one_slot: DagHarness, write_dag: WriteDag, tmp_path: Path
) -> None:
    out = tmp_path / "order.txt"
    write_dag(
        "weighted.py",
        f"""
from tailrace import DAG
from tailrace.sdk.operators.python import PythonOperator


def note(name):
    with open({str(out)!r}, "a") as f:
        f.write(name + "\\n")


with DAG("weighted"):
    for name, weight in [("low", 1), ("high", 10), ("mid", 5)]:
        PythonOperator(task_id=name, python_callable=note, op_args=[name],
                       priority_weight=weight, weight_rule="absolute")
    # The downstream rule (the default): 2 of its own plus 2 for each of its three leaves.
    root = PythonOperator(task_id="root", python_callable=note, op_args=["root"],
                          priority_weight=2)
    for i in range(3):
        root >> PythonOperator(task_id=f"leaf{{i}}", python_callable=note, op_args=[f"leaf{{i}}"],
                               priority_weight=2)
""",
    )
    one_slot.parse()
    pk = one_slot.trigger("weighted")
    assert one_slot.run(pk)["state"] == "success"
    order = out.read_text().split()
    # high (10), root (8), mid (5); then the leaves (2 each) before low (1).
    assert order[:3] == ["high", "root", "mid"]
    assert sorted(order[3:6]) == ["leaf0", "leaf1", "leaf2"]
    assert order[6:] == ["low"]
