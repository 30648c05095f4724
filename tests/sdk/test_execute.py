from __future__ import annotations

from typing import Any

import pytest

from tailrace.sdk import (
    DAG,
    BaseBranchOperator,
    BaseOperator,
    BranchPythonOperator,
    EmptyOperator,
    FailTask,
    ShortCircuitOperator,
    SkipTask,
    TaskGroup,
    task,
)
from tailrace.sdk.errors import DagDefinitionError
from tailrace.sdk.execution import execute_task, render_map_index


class Recorder(BaseOperator):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.calls: list[str] = []

    def pre_execute(self, context: Any) -> None:
        context["ti"].xcom_push("pre", True)

    def execute(self, context: Any) -> Any:
        context["ti"].xcom_push("custom", 7)
        return "result"

    def post_execute(self, context: Any, result: Any = None) -> None:
        context["ti"].xcom_push("post", result)


def test_hooks_and_xcom_pushes(runner: Any) -> None:
    with DAG("d") as d:
        Recorder(task_id="r")
    r = runner(d)
    assert r.run("r") == "result"
    assert r.store == {
        ("r", -1, "pre"): True,
        ("r", -1, "custom"): 7,
        ("r", -1, "post"): "result",
        ("r", -1, "return_value"): "result",
    }


def test_signals_propagate_unchanged(runner: Any) -> None:
    with DAG("d") as d:

        @task
        def skipper() -> None:
            raise SkipTask("nothing to do")

        @task
        def failer() -> None:
            raise FailTask("broken input")

        skipper()
        failer()
    r = runner(d)
    with pytest.raises(SkipTask, match="nothing to do"):
        r.run("skipper")
    with pytest.raises(FailTask, match="broken input"):
        r.run("failer")
    assert r.store == {}


def test_context_task_is_a_copy_of_the_dag_task(runner: Any) -> None:
    with DAG("d") as d:
        EmptyOperator(task_id="e")
    context = runner(d).context("e")
    execute_task(d.get_task("e"), context)
    assert context["task"] is not d.get_task("e")
    assert context["task"].task_id == "e"
    assert render_map_index(context["task"], context) is None


def branch_dag(choice: Any) -> DAG:
    with DAG("br") as d:
        branch = BranchPythonOperator(task_id="branch", python_callable=lambda: choice)
        a, b, c = (EmptyOperator(task_id=t) for t in "abc")
        with TaskGroup("grp") as grp:
            g1 = EmptyOperator(task_id="g1")
            g2 = EmptyOperator(task_id="g2")
            g1 >> g2
        join = EmptyOperator(task_id="join", trigger_rule="none_failed_min_one_success")
        branch >> [a, b, c, grp]
        a >> join
        b >> join
        a >> c  # c is reachable from a
    return d


@pytest.mark.parametrize(
    ("choice", "skipped"),
    [
        ("a", ["b", "grp.g1"]),  # c is downstream of a, so it is not skipped
        (["b"], ["a", "c", "grp.g1"]),
        ("grp", ["a", "b", "c"]),  # a group id means the group's roots
        (["a", "grp.g1"], ["b"]),
        (None, ["a", "b", "c", "grp.g1"]),
    ],
)
def test_branch_skip_sets(choice: Any, skipped: list[str], runner: Any) -> None:
    r = runner(branch_dag(choice))
    assert r.run("branch") == choice
    assert r.last_ti.skipped == (skipped or None)


def test_branch_to_unknown_task_is_an_error(runner: Any) -> None:
    r = runner(branch_dag("nope"))
    with pytest.raises(DagDefinitionError, match="'nope'"):
        r.run("branch")


def test_task_branch_decorator_and_custom_branch_operator(runner: Any) -> None:
    class Pick(BaseBranchOperator):
        def choose_branch(self, context: Any) -> str:
            return "y"

    with DAG("d") as d:

        @task.branch
        def choose(**context: Any) -> str:
            return "x" if context["params"]["go_x"] else "y"

        x, y = EmptyOperator(task_id="x"), EmptyOperator(task_id="y")
        choose() >> [x, y]
        Pick(task_id="pick") >> [EmptyOperator(task_id="px"), EmptyOperator(task_id="y2")]
    assert runner(d, conf={"go_x": True}).run("choose") == "x"
    r = runner(d, conf={"go_x": False})
    assert r.run("choose") == "y"
    assert r.last_ti.skipped == ["x"]
    r.run("pick")
    assert r.last_ti.skipped == ["px", "y2"]


def short_circuit_dag(result: Any, ignore: bool) -> DAG:
    with DAG("sc") as d:
        check = ShortCircuitOperator(
            task_id="check",
            python_callable=lambda: result,
            ignore_downstream_trigger_rules=ignore,
        )
        a, b, c = (EmptyOperator(task_id=t) for t in "abc")
        check >> a >> b >> c
        check >> EmptyOperator(task_id="side")
    return d


def test_short_circuit_truthy_skips_nothing(runner: Any) -> None:
    r = runner(short_circuit_dag([1], True))
    assert r.run("check") == [1]
    assert r.last_ti.skipped is None
    assert r.xcom("check") == [1]


def test_short_circuit_falsy_skips_all_descendants(runner: Any) -> None:
    r = runner(short_circuit_dag(0, True))
    assert r.run("check") == 0
    assert r.last_ti.skipped == ["a", "b", "c", "side"]


def test_short_circuit_respecting_trigger_rules_skips_direct_only(runner: Any) -> None:
    r = runner(short_circuit_dag(False, False))
    r.run("check")
    assert r.last_ti.skipped == ["a", "side"]


def test_task_short_circuit_decorator(runner: Any) -> None:
    with DAG("d") as d:

        @task.short_circuit
        def gate() -> bool:
            return False

        gate() >> EmptyOperator(task_id="after")
    r = runner(d)
    r.run("gate")
    assert r.last_ti.skipped == ["after"]


def test_mapped_branch_uses_concrete_operator(runner: Any) -> None:
    with DAG("d") as d:

        @task.branch
        def pick(name: str) -> str:
            return name

        pick.expand(name=["l", "r"]) >> [EmptyOperator(task_id="l"), EmptyOperator(task_id="r")]
    r = runner(d)
    assert r.run("pick", map_index=1) == "r"
    assert r.last_ti.skipped == ["l"]
