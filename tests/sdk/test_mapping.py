from __future__ import annotations

from typing import Any

import pytest

from tailrace.sdk import DAG, BashOperator, MappedOperator, PythonOperator, task
from tailrace.sdk.errors import DagDefinitionError
from tailrace.sdk.execution import render_map_index


def add(x: int, y: int) -> int:
    return x + y


def test_classic_partial_expand_creates_mapped_operator(runner: Any) -> None:
    with DAG("d", default_args={"retries": 4}) as d:
        mapped = PythonOperator.partial(task_id="m", python_callable=add, retries=1).expand(
            op_args=[[1, 2], [3, 4]]
        )
    assert isinstance(mapped, MappedOperator)
    assert d.get_task("m") is mapped
    assert mapped.operator_class is PythonOperator
    assert mapped.expand_input == {"op_args": [[1, 2], [3, 4]]}
    assert mapped.partial_kwargs["python_callable"] is add
    assert mapped.retries == 1 and mapped.queue == "default"
    r = runner(d)
    assert r.run("m", map_index=0) == 3
    assert r.run("m", map_index=1) == 7
    assert r.store[("m", 1, "return_value")] == 7


def test_default_args_reach_mapped_operator() -> None:
    with DAG("d", default_args={"retries": 4, "queue": "q"}):
        mapped = PythonOperator.partial(task_id="m", python_callable=add).expand(op_args=[[1, 2]])
    assert (mapped.retries, mapped.queue) == (4, "q")


def test_cartesian_product_last_argument_varies_fastest(runner: Any) -> None:
    with DAG("d") as d:

        @task
        def pair(x: int, y: str) -> str:
            return f"{x}{y}"

        pair.expand(x=[1, 2], y=["a", "b", "c"])
    r = runner(d)
    mapped = d.get_task("pair")
    assert isinstance(mapped, MappedOperator)
    assert mapped.get_mapped_length(r.context("pair", 0)) == 6
    results = [r.run("pair", map_index=i) for i in range(6)]
    assert results == ["1a", "1b", "1c", "2a", "2b", "2c"]
    with pytest.raises(IndexError, match="out of range"):
        r.run("pair", map_index=6)


def test_expand_over_upstream_output_and_reduce(runner: Any) -> None:
    with DAG("d") as d:

        @task
        def numbers() -> list[int]:
            return [1, 2, 3]

        @task
        def scale(n: int, factor: int) -> int:
            return n * factor

        @task
        def total(values: list[int]) -> int:
            return sum(values)

        scaled = scale.partial(factor=10).expand(n=numbers())
        total(scaled)
    assert d.get_task("scale").upstream_task_ids == {"numbers"}
    assert d.get_task("total").upstream_task_ids == {"scale"}
    r = runner(d)
    r.run("numbers")
    assert [r.run("scale", map_index=i) for i in range(3)] == [10, 20, 30]
    assert r.run("total") == 60


def test_expand_over_dict_gives_key_value_pairs(runner: Any) -> None:
    with DAG("d") as d:

        @task
        def show(item: tuple[str, int]) -> str:
            key, value = item
            return f"{key}={value}"

        show.expand(item={"a": 1, "b": 2})
    r = runner(d)
    assert [r.run("show", map_index=i) for i in range(2)] == ["a=1", "b=2"]


def test_xcomarg_map_is_lazy_and_applied_when_resolved(runner: Any) -> None:
    calls: list[int] = []

    def to_cmd(n: int) -> str:
        calls.append(n)
        return f"echo {n * 2}"

    with DAG("d") as d:

        @task
        def numbers() -> list[int]:
            return [1, 2]

        cmds = numbers().map(to_cmd)
        BashOperator.partial(task_id="echo").expand(bash_command=cmds)
    assert calls == []
    r = runner(d)
    r.run("numbers")
    assert r.run("echo", map_index=1) == "4"
    assert r.run("echo", map_index=0) == "2"


def test_map_chains_callables(fake_ti: Any) -> None:
    with DAG("d"):

        @task
        def numbers() -> list[int]:
            return [1, 2]

        chained = numbers().map(lambda n: n + 1).map(lambda n: n * 10)
    store = {("numbers", -1, "return_value"): [1, 2]}
    ti = fake_ti(store, task_id="x")
    assert chained.resolve({"ti": ti}) == [20, 30]


def test_values_pulled_from_xcom_are_not_rendered_as_templates(runner: Any) -> None:
    with DAG("d") as d:

        @task
        def texts() -> list[str]:
            return ["".join(["{{ ds", " }}"])]  # a distinct object, as if decoded from XCom

        @task
        def echo(text: str, literal: str) -> str:
            return f"{text}|{literal}"

        echo.partial(literal="{{ ds }}").expand(text=texts())
    r = runner(d)
    r.run("texts")
    assert r.run("echo", map_index=0) == "{{ ds }}|2024-03-05"


def test_unmap_builds_concrete_operator_without_touching_the_dag(runner: Any) -> None:
    with DAG("d") as d:
        start = PythonOperator(task_id="start", python_callable=lambda: None)
        mapped = PythonOperator.partial(task_id="m", python_callable=add).expand(
            op_kwargs=[{"x": 1, "y": 1}]
        )
        start >> mapped
    op = mapped.unmap(runner(d).context("m", 0))
    assert isinstance(op, PythonOperator)
    assert op.task_id == "m" and op.op_kwargs == {"x": 1, "y": 1}
    assert op.upstream_task_ids == {"start"}
    assert d.get_task("m") is mapped


def test_mapped_task_in_group_and_map_index_template(runner: Any) -> None:
    from tailrace.sdk import TaskGroup

    with DAG("d") as d, TaskGroup("g"):

        @task(map_index_template="{{ task.op_kwargs['name'] }}")
        def hello(name: str) -> str:
            return f"hi {name}"

        hello.expand(name=["ann", "bob"])
    assert "g.hello" in d.task_dict
    r = runner(d)
    context = r.context("g.hello", 1)
    from tailrace.sdk.execution import execute_task

    assert execute_task(d.get_task("g.hello"), context) == "hi bob"
    assert render_map_index(context["task"], context) == "bob"


@pytest.mark.parametrize(
    ("make", "field", "fragment"),
    [
        (
            lambda: PythonOperator.partial(task_id="m", python_callable=add).expand(nope=[1]),
            "nope",
            "cannot map over",
        ),
        (
            lambda: PythonOperator.partial(task_id="m", python_callable=add).expand(task_id=["a"]),
            "task_id",
            "cannot map over",
        ),
        (
            lambda: PythonOperator.partial(task_id="m", python_callable=add, op_args=[]).expand(
                op_args=[[1]]
            ),
            "op_args",
            "both partial() and expand()",
        ),
        (
            lambda: PythonOperator.partial(task_id="m", python_callable=add).expand(op_args=5),
            "op_args",
            "got a int",
        ),
    ],
)
def test_invalid_classic_expand(make: Any, field: str, fragment: str) -> None:
    with DAG("mapdag"), pytest.raises(DagDefinitionError) as info:
        make()
    assert info.value.field == field and info.value.dag_id == "mapdag"
    assert info.value.task_id == "m" and fragment in str(info.value)


def test_partial_needs_task_id() -> None:
    with pytest.raises(DagDefinitionError, match="task_id"):
        PythonOperator.partial(python_callable=add)


def test_invalid_decorated_expand() -> None:
    with DAG("d"):

        @task
        def f(x: int, y: int) -> int:
            return x + y

        with pytest.raises(DagDefinitionError, match="both partial"):
            f.partial(x=1).expand(x=[1])
        with pytest.raises(DagDefinitionError, match="Invalid arguments"):
            f.expand(z=[1])
        with pytest.raises(DagDefinitionError, match="missing argument"):
            f.expand(x=[1])
        with pytest.raises(DagDefinitionError, match="got a str"):
            f.partial(x=1).expand(y="abc")


def test_expand_of_non_list_xcom_fails_clearly(runner: Any) -> None:
    with DAG("d") as d:

        @task
        def scalar() -> int:
            return 5

        @task
        def use(x: int) -> int:
            return x

        use.expand(x=scalar())
    r = runner(d)
    r.run("scalar")
    with pytest.raises(TypeError, match="'use' cannot expand argument 'x'"):
        r.run("use", map_index=0)
