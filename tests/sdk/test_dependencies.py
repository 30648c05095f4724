from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tailrace.sdk import (
    DAG,
    BaseOperator,
    EmptyOperator,
    TaskGroup,
    chain,
    cross_downstream,
    task,
    task_group,
)
from tailrace.sdk.errors import DagDefinitionError, DuplicateTaskIdError


def ids(tasks: Any) -> set[str]:
    return {t.task_id for t in tasks}


def edges(dag: DAG) -> set[tuple[str, str]]:
    return {(t.task_id, d) for t in dag.tasks for d in t.downstream_task_ids}


def test_shift_operators_and_return_values() -> None:
    with DAG("d") as d:
        a, b, c, e = (EmptyOperator(task_id=t) for t in "abce")
        assert (a >> b) is b
        assert (c << b) is b
        result = a >> [c, e]
        assert result == [c, e]
    assert edges(d) == {("a", "b"), ("b", "c"), ("a", "c"), ("a", "e")}
    assert b.upstream_task_ids == {"a"}
    assert ids(a.downstream_list) == {"b", "c", "e"}


def test_lists_on_the_left() -> None:
    with DAG("d") as d:
        a, b, c, x = (EmptyOperator(task_id=t) for t in "abcx")
        [a, b] >> c
        [a, b] << x
    assert edges(d) == {("a", "c"), ("b", "c"), ("x", "a"), ("x", "b")}


def test_set_upstream_downstream() -> None:
    with DAG("d") as d:
        a, b, c = (EmptyOperator(task_id=t) for t in "abc")
        a.set_downstream([b, c])
        c.set_upstream(b)
    assert edges(d) == {("a", "b"), ("a", "c"), ("b", "c")}


def test_flat_relatives() -> None:
    with DAG("d"):
        a, b, c, e = (EmptyOperator(task_id=t) for t in "abce")
        a >> b >> c
        a >> e
    assert a.get_flat_relative_ids() == {"b", "c", "e"}
    assert c.get_flat_relative_ids(upstream=True) == {"a", "b"}


def test_task_without_dag_joins_dag_through_dependency() -> None:
    with DAG("d") as d:
        a = EmptyOperator(task_id="a")
    loose = EmptyOperator(task_id="loose")
    a >> loose
    assert loose.dag is d and "loose" in d.task_dict


def test_dependency_across_dags_is_an_error() -> None:
    a = EmptyOperator(task_id="a", dag=DAG("one"))
    b = EmptyOperator(task_id="b", dag=DAG("two"))
    with pytest.raises(DagDefinitionError, match="same DAG"):
        a >> b


def test_chain_linear_and_lists() -> None:
    with DAG("d") as d:
        a, b, c, e, f, g = (EmptyOperator(task_id=t) for t in "abcefg")
        chain(a, [b, c], [e, f], g)
    assert edges(d) == {("a", "b"), ("a", "c"), ("b", "e"), ("c", "f"), ("e", "g"), ("f", "g")}


def test_chain_lists_of_different_length_fail() -> None:
    with DAG("d"):
        a, b, c = (EmptyOperator(task_id=t) for t in "abc")
        with pytest.raises(ValueError, match="equal length"):
            chain([a, b], [c])


def test_chain_with_xcomargs_and_groups() -> None:
    with DAG("d") as d:

        @task
        def t1() -> int:
            return 1

        with TaskGroup("g") as g:
            EmptyOperator(task_id="in1")
        last = EmptyOperator(task_id="last")
        chain(t1(), g, last)
    assert edges(d) == {("t1", "g.in1"), ("g.in1", "last")}


def test_cross_downstream() -> None:
    with DAG("d") as d:
        a, b, c, e = (EmptyOperator(task_id=t) for t in "abce")
        cross_downstream([a, b], [c, e])
    assert edges(d) == {("a", "c"), ("a", "e"), ("b", "c"), ("b", "e")}


def test_shift_with_non_task_is_type_error() -> None:
    with DAG("d"):
        a = EmptyOperator(task_id="a")
        with pytest.raises(TypeError, match="Dependencies can only be set"):
            a >> "b"  # type: ignore[operator]


def test_task_group_prefixes_and_roots_leaves() -> None:
    with DAG("d") as d:
        start = EmptyOperator(task_id="start")
        with TaskGroup("grp") as g:
            x = EmptyOperator(task_id="x")
            y = EmptyOperator(task_id="y")
            z = EmptyOperator(task_id="z")
            x >> z
            y >> z
        end = EmptyOperator(task_id="end")
        start >> g >> end
    assert ids(g.roots) == {"grp.x", "grp.y"} and ids(g.leaves) == {"grp.z"}
    assert edges(d) >= {("start", "grp.x"), ("start", "grp.y"), ("grp.z", "end")}
    assert x.task_group is g and x.label == "x"
    assert d.task_group_dict == {"grp": g}
    assert ids(g.iter_tasks()) == {"grp.x", "grp.y", "grp.z"}
    assert y.task_id == "grp.y" and z.task_id == "grp.z"


def test_nested_groups_and_prefix_group_id_false() -> None:
    with DAG("d") as d:
        with TaskGroup("outer") as outer:
            with TaskGroup("inner") as inner:
                EmptyOperator(task_id="t")
            with TaskGroup("flat", prefix_group_id=False):
                EmptyOperator(task_id="u")
        outer >> EmptyOperator(task_id="after")
    assert set(d.task_dict) == {"outer.inner.t", "u", "after"}
    assert inner.group_id == "outer.inner"
    assert "outer.flat" in d.task_group_dict


def test_group_to_group_dependency() -> None:
    with DAG("d") as d:
        with TaskGroup("g1") as g1:
            EmptyOperator(task_id="a")
        with TaskGroup("g2") as g2:
            EmptyOperator(task_id="b")
        g1 >> g2
    assert edges(d) == {("g1.a", "g2.b")}


def test_duplicate_group_id() -> None:
    with DAG("gd"):
        TaskGroup("g")
        with pytest.raises(DuplicateTaskIdError) as info:
            TaskGroup("g")
    assert info.value.field == "group_id" and "'g'" in str(info.value)


def test_group_outside_dag_is_an_error() -> None:
    with pytest.raises(DagDefinitionError, match="outside a DAG"):
        TaskGroup("g")


def test_default_args_from_dag_and_group_explicit_wins() -> None:
    with DAG("d", default_args={"retries": 2, "owner": "dag", "queue": "q1"}):
        plain = EmptyOperator(task_id="plain")
        explicit = EmptyOperator(task_id="explicit", retries=7)
        with TaskGroup("g", default_args={"owner": "group", "retry_delay": timedelta(seconds=9)}):
            grouped = EmptyOperator(task_id="grouped")
    assert (plain.retries, plain.owner, plain.queue) == (2, "dag", "q1")
    assert explicit.retries == 7
    assert (grouped.owner, grouped.retries) == ("group", 2)
    assert grouped.retry_delay == timedelta(seconds=9)


def test_default_args_fill_subclass_init_arguments() -> None:
    class Greet(BaseOperator):
        def __init__(self, *, greeting: str, name: str = "world", **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.greeting = greeting
            self.name = name

        def execute(self, context: Any) -> str:
            return f"{self.greeting} {self.name}"

    with DAG("d", default_args={"greeting": "hi", "name": "all", "unrelated": 1, "retries": 1}):
        op = Greet(task_id="g")
        op2 = Greet(task_id="g2", name="me")
    assert (op.greeting, op.name, op.retries) == ("hi", "all", 1)
    assert op2.name == "me"


def test_missing_required_operator_argument_names_task() -> None:
    class Needy(BaseOperator):
        def __init__(self, *, needed: int, **kwargs: Any) -> None:
            super().__init__(**kwargs)

        def execute(self, context: Any) -> None:
            return None

    with DAG("nd"), pytest.raises(DagDefinitionError) as info:
        Needy(task_id="t")
    assert info.value.task_id == "t" and info.value.field == "needed"


def test_operator_settings() -> None:
    with DAG("d"):
        op = EmptyOperator(
            task_id="t",
            retries=3,
            retry_delay=30,
            max_retry_delay=timedelta(minutes=5),
            retry_exponential_backoff=True,
            execution_timeout=timedelta(seconds=10),
            max_active_tis_per_dag=2,
            doc_md="docs",
            trigger_rule="all_done",
        )
    assert op.retry_delay == timedelta(seconds=30)
    assert op.execution_timeout == timedelta(seconds=10)
    assert (op.queue, op.max_active_tis_per_dag) == ("default", 2)
    assert op.trigger_rule == "all_done"
    default = EmptyOperator(task_id="x")
    assert default.retry_delay == timedelta(minutes=5) and default.pool == "default_pool"
    assert EmptyOperator(task_id="zero", retry_delay=0).retry_delay == timedelta(0)


def test_mapped_operator_settings() -> None:
    from tailrace.sdk import PythonOperator

    with DAG("d"):
        zero = PythonOperator.partial(task_id="z", python_callable=print, retry_delay=0).expand(
            op_args=[[1]]
        )
        default = PythonOperator.partial(task_id="x", python_callable=print).expand(op_args=[[1]])
    assert zero.retry_delay == timedelta(0)
    assert default.retry_delay == timedelta(minutes=5) and default.pool == "default_pool"


def test_an_operator_without_execute_can_be_created_as_in_airflow() -> None:
    # A start_from_trigger operator needs none; the DAG's validation refuses the others
    # (tests/sdk/test_dag.py), and calling the missing method says what is missing.
    class NoExecute(BaseOperator):
        pass

    op = NoExecute(task_id="t")
    with pytest.raises(NotImplementedError, match=r"NoExecute \(task 't'\) defines no execute"):
        op.execute({})


def test_task_group_decorator() -> None:
    with DAG("d") as d:

        @task
        def source() -> int:
            return 1

        @task
        def double(x: int) -> int:
            return 2 * x

        @task_group
        def process(value: Any) -> Any:
            return double(double(value))

        first = process(source())
        second = process(source())
        end = EmptyOperator(task_id="end")
        first >> end
    assert {"process", "process__1"} <= set(d.task_group_dict)
    assert set(d.task_dict) == {
        "source",
        "source__1",
        "process.double",
        "process.double__1",
        "process__1.double",
        "process__1.double__1",
        "end",
    }
    assert d.get_task("process.double").upstream_task_ids == {"source"}
    assert d.get_task("end").upstream_task_ids == {"process.double__1"}
    assert second.operator.task_id == "process__1.double__1"


def test_task_group_decorator_returns_group_when_function_returns_nothing() -> None:
    with DAG("d") as d:

        @task_group(group_id="custom")
        def grp() -> None:
            EmptyOperator(task_id="a")

        g = grp()
        g >> EmptyOperator(task_id="b")
    assert isinstance(g, TaskGroup) and g.group_id == "custom"
    assert edges(d) == {("custom.a", "b")}
