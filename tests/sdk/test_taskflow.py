from __future__ import annotations

from typing import Any, TypedDict

import pytest

from tailrace.sdk import DAG, PythonOperator, XComArg, get_current_context, task
from tailrace.sdk.errors import DagDefinitionError, MultipleOutputsError


def test_calling_task_returns_xcomarg_and_wires_dependencies(runner: Any) -> None:
    with DAG("d") as d:

        @task
        def extract() -> int:
            return 20

        @task
        def combine(a: int, b: int, *, scale: int = 1) -> int:
            return (a + b) * scale

        out = extract()
        result = combine(out, 2, scale=out)
    assert isinstance(result, XComArg)
    assert result.operator.task_id == "combine"
    assert d.get_task("combine").upstream_task_ids == {"extract"}
    r = runner(d)
    assert r.run("extract") == 20
    assert r.run("combine") == 440
    assert r.xcom("combine") == 440


def test_operator_output_as_argument(runner: Any) -> None:
    with DAG("d") as d:
        classic = PythonOperator(task_id="classic", python_callable=lambda: [1, 2, 3])

        @task
        def total(values: list[int]) -> int:
            return sum(values)

        total(classic.output)
    assert d.get_task("total").upstream_task_ids == {"classic"}
    r = runner(d)
    r.run("classic")
    assert r.run("total") == 6


def test_repeated_calls_get_unique_ids_and_override() -> None:
    with DAG("d") as d:

        @task
        def step() -> None:
            return None

        step()
        step()
        step()
        step.override(task_id="named")()
        step.override(task_id="named")()
    assert d.task_ids == ["step", "step__1", "step__2", "named", "named__1"]


def test_decorator_arguments_reach_operator() -> None:
    with DAG("d", default_args={"retries": 5, "owner": "o"}) as d:

        @task(task_id="custom", retries=2, queue="q", trigger_rule="all_done")
        def f() -> None:
            return None

        f()
    op = d.get_task("custom")
    assert (op.retries, op.queue, op.owner, op.trigger_rule) == (2, "q", "o", "all_done")


class Stats(TypedDict):
    n: int


def test_multiple_outputs_inferred_from_dict_annotation(runner: Any) -> None:
    with DAG("d") as d:

        @task
        def as_dict() -> dict[str, int]:
            return {"a": 1, "b": 2}

        @task
        def as_typed() -> Stats:
            return {"n": 1}

        @task
        def as_list() -> list[int]:
            return [1]

        @task(multiple_outputs=False)
        def forced_off() -> dict[str, int]:
            return {"a": 1}

        @task
        def unannotated():  # type: ignore[no-untyped-def]
            return {"a": 1}

        for f in (as_dict, as_typed, as_list, forced_off, unannotated):
            f()
    flags = {t.task_id: t.multiple_outputs for t in d.tasks}
    assert flags == {
        "as_dict": True,
        "as_typed": True,
        "as_list": False,
        "forced_off": False,
        "unannotated": False,
    }
    r = runner(d)
    r.run("as_dict")
    assert (r.xcom("as_dict", "a"), r.xcom("as_dict", "b")) == (1, 2)
    assert r.xcom("as_dict") == {"a": 1, "b": 2}
    r.run("forced_off")
    assert ("forced_off", -1, "a") not in r.store


def test_multiple_outputs_keys_feed_downstream(runner: Any) -> None:
    with DAG("d") as d:

        @task(multiple_outputs=True)
        def pair() -> Any:
            return {"left": 2, "right": 3}

        @task
        def mul(a: int, b: int) -> int:
            return a * b

        p = pair()
        mul(p["left"], p["right"])
    assert d.get_task("mul").iter_xcom_dependencies() == [("pair", "left"), ("pair", "right")]
    r = runner(d)
    r.run("pair")
    assert r.run("mul") == 6


def test_multiple_outputs_requires_dict_with_string_keys(runner: Any) -> None:
    with DAG("d") as d:

        @task(multiple_outputs=True)
        def not_a_dict() -> Any:
            return [1, 2]

        @task(multiple_outputs=True)
        def int_keys() -> Any:
            return {1: "a"}

        not_a_dict()
        int_keys()
    r = runner(d)
    with pytest.raises(MultipleOutputsError, match=r"'not_a_dict'.*list"):
        r.run("not_a_dict")
    with pytest.raises(MultipleOutputsError, match="non-string keys"):
        r.run("int_keys")


def test_context_values_injected_by_name_and_kwargs(runner: Any) -> None:
    seen: dict[str, Any] = {}
    with DAG("d", params={"p": 1}) as d:

        @task
        def by_name(x: int, ti: Any = None, ds: str | None = None) -> int:
            seen["ti"], seen["ds"] = ti, ds
            return x

        @task
        def by_kwargs(**context: Any) -> None:
            seen["keys"] = set(context)

        @task
        def current() -> str:
            return get_current_context()["ti"].task_id

        by_name(3)
        by_kwargs()
        current()
    r = runner(d)
    assert r.run("by_name") == 3
    assert seen["ti"].task_id == "by_name" and seen["ds"] == "2024-03-05"
    r.run("by_kwargs")
    assert {"ti", "params", "ds", "dag_run", "logical_date"} <= seen["keys"]
    assert r.run("current") == "current"
    with pytest.raises(RuntimeError, match="outside a running task"):
        get_current_context()


def test_wrong_call_arguments_fail_at_definition() -> None:
    with DAG("badcall"):

        @task
        def f(a: int) -> int:
            return a

        with pytest.raises(DagDefinitionError) as missing:
            f()
        with pytest.raises(DagDefinitionError, match="Invalid arguments"):
            f(1, 2)  # type: ignore[call-arg]
    assert missing.value.field == "a" and missing.value.dag_id == "badcall"


def test_do_xcom_push_false_and_none_result(runner: Any) -> None:
    with DAG("d") as d:

        @task(do_xcom_push=False)
        def quiet() -> int:
            return 1

        @task
        def nothing() -> None:
            return None

        quiet()
        nothing()
    r = runner(d)
    assert r.run("quiet") == 1
    assert r.run("nothing") is None
    assert r.store == {}


def test_xcomarg_shift_and_getitem() -> None:
    with DAG("d") as d:

        @task
        def a() -> int:
            return 1

        @task
        def b() -> int:
            return 2

        xa, xb = a(), b()
        xa >> xb
    assert d.get_task("b").upstream_task_ids == {"a"}
    assert xa["k"].key == "k" and xa["k"].operator is xa.operator
    with pytest.raises(TypeError, match="not iterable"):
        list(xa)


def test_decorated_function_keeps_metadata() -> None:
    @task
    def documented(x: int) -> int:
        """Docs."""
        return x

    assert documented.__name__ == "documented"
    assert documented.__doc__ == "Docs."
    assert documented.function(2) == 2


def test_python_operator_positional_args_and_kwargs_context(runner: Any) -> None:
    def f(a: int, **kwargs: Any) -> Any:
        return a, kwargs["b"], "a" in kwargs, kwargs["ti"].task_id

    def g(a: int, b: int) -> int:
        return a * b

    with DAG("d") as d:
        PythonOperator(task_id="f", python_callable=f, op_args=[1], op_kwargs={"b": 2})
        PythonOperator(task_id="g", python_callable=g, op_args=[3], op_kwargs={"b": 4})
    r = runner(d)
    assert r.run("f") == (1, 2, False, "f")
    assert r.run("g") == 12


def test_python_callable_must_be_callable() -> None:
    with DAG("d"), pytest.raises(DagDefinitionError, match="python_callable"):
        PythonOperator(task_id="p", python_callable="not callable")  # type: ignore[arg-type]
