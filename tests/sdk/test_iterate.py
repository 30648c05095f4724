"""``.iterate()`` in the SDK: item access, combinators, lazy whole values, checks."""

from __future__ import annotations

from typing import Any

import pytest

from tailrace.sdk import DAG, MappedOperator, PythonOperator, task
from tailrace.sdk._xcom_arg import ABSENT, LazyItems
from tailrace.sdk.errors import DagDefinitionError, SkipTask
from tailrace.serialization import serialize_dag


def test_iterate_instance_gets_its_own_item_through_combinators(runner: Any) -> None:
    with DAG("d") as d:

        @task
        def numbers() -> list[int]:
            return [0, 1, 2, 3, 4]

        @task
        def show(item: Any) -> Any:
            return item

        ns = numbers()
        evens = show.override(task_id="evens").iterate(item=ns.filter(lambda n: n % 2 == 0))
        pairs = show.override(task_id="pairs").iterate(item=ns.map(str).zip(["a", "b"]))
        batches = show.override(task_id="batches").iterate(item=ns.concat([5, 6]).batched(3))
    r = runner(d)
    r.run("numbers")
    assert r.run("evens", map_index=2) == 2
    with pytest.raises(SkipTask, match="item 1 of argument 'item' was filtered out"):
        r.run("evens", map_index=1)
    assert r.run("pairs", map_index=1) == ("1", "b")
    assert [r.run("batches", map_index=i) for i in range(3)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert isinstance(evens.operator, MappedOperator) and evens.operator.lazy
    assert pairs.operator.upstream_task_ids == batches.operator.upstream_task_ids == {"numbers"}


def test_several_iterate_arguments_are_zipped_and_partial_applies(runner: Any) -> None:
    with DAG("d") as d:
        PythonOperator.partial(task_id="m", python_callable=lambda x, y, z: (x, y, z)).iterate(
            op_args=[[1], [2]], op_kwargs=[{"y": 1, "z": 2}, {"y": 3, "z": 4}]
        )
    r = runner(d)
    assert r.run("m", map_index=1) == (2, 3, 4)


def test_items_of_a_mapped_source_and_absent_ones(runner: Any, fake_ti: Any) -> None:
    with DAG("d") as d:

        @task
        def double(n: int) -> int:
            return n * 2

        doubled = double.iterate(n=[1, 2, 3])
        doubled_arg = doubled.batched(2)
    r = runner(d)
    r.run("double", map_index=0)
    r.run("double", map_index=2)  # instance 1 was skipped: it pushed nothing
    ctx = r.context("double", map_index=0)
    assert doubled.item(1, ctx) is ABSENT
    assert doubled_arg.item(0, ctx) == [2]  # the absent item dropped
    assert doubled_arg.item(1, ctx) == [6]
    assert doubled.concat([9]).item(3, ctx) == 9  # after the 3 instances, skipped included


def test_whole_stream_arguments_stay_lazy(runner: Any) -> None:
    consumed: list[int] = []

    def numbers() -> Any:
        for i in range(5):
            consumed.append(i)
            yield i

    class Lazy:  # what a worker hands over for a stream: iterable, no list
        def __iter__(self) -> Any:
            return numbers()

    with DAG("d") as d:

        @task
        def total(values: Any) -> int:
            return sum(values)

        source = PythonOperator(task_id="src", python_callable=lambda: None)
        total(values=source.output.map(lambda v: v * 10).filter(lambda v: v > 10))
    r = runner(d)
    r.store[("src", -1, "return_value")] = Lazy()
    ctx = r.context("total")
    value = d.get_task("total").op_kwargs["values"].resolve(ctx)
    assert isinstance(value, LazyItems) and consumed == []
    assert list(value) == [20, 30, 40]


def test_iterate_serializes_its_shape_and_sources_not_callables() -> None:
    with DAG("d") as d:

        @task
        def a() -> list[int]:
            return [1]

        @task
        def b(x: Any) -> Any:
            return x

        out = a()
        b.iterate(x=out.filter(bool).zip(out.batched(2)))
    serialized = serialize_dag(d).task("b")
    assert serialized.is_mapped and serialized.expand == {}
    assert serialized.iterate_sources == ["a"]
    assert serialized.iterate is not None and serialized.iterate.op == "zip"
    assert [s.op for s in serialized.iterate.args] == ["filter", "batched"]


def test_expand_refuses_combinators_whose_length_is_unknown() -> None:
    with DAG("d"):

        @task
        def a() -> list[int]:
            return [1]

        @task
        def b(x: Any) -> Any:
            return x

        with pytest.raises(DagDefinitionError, match=r"expand\(\) cannot map over") as err:
            b.expand(x=a().filter(bool))
    assert "Use .iterate(...)" in str(err.value)


def test_iterate_rejects_arguments_like_expand_does() -> None:
    with DAG("d"):

        @task
        def b(x: Any) -> Any:
            return x

        with pytest.raises(DagDefinitionError, match=r"iterate\(\) needs at least one"):
            b.iterate()
        with pytest.raises(DagDefinitionError, match=r"iterate\(\) got a int"):
            b.iterate(x=3)
        with pytest.raises(DagDefinitionError, match="both partial\\(\\) and iterate\\(\\)"):
            b.partial(x=1).iterate(x=[1])
