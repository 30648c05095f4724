"""Assets in the SDK: URIs checked where written, conditions, outlets and inlets, the
outlet and inlet accessors, @asset — no database involved."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tailrace import DAG, Asset, AssetAlias, AssetAll, AssetAny, EmptyOperator, asset, dag, task
from tailrace.sdk.errors import DagDefinitionError, InvalidAssetError, InvalidScheduleError
from tailrace.serialization import serialize_dag


@pytest.mark.parametrize(
    ("uri", "reason"),
    [
        ("airflow://x", "the scheme 'airflow' is reserved"),
        ("s3://user:secret@bucket/key", "credentials"),
        ("s3://", "nothing after the scheme"),
        ("s3://bucket/my file.csv", "whitespace"),
        ("s3://bücket/x", "non-ASCII"),
        ("   ", "empty"),
        ("x" * 1501, "longer than 1500"),
    ],
)
def test_an_invalid_uri_is_refused_naming_it(uri: str, reason: str) -> None:
    with pytest.raises(InvalidAssetError, match=reason) as raised:
        Asset(uri)
    assert repr(uri)[:40].rstrip("'") in str(raised.value)


def test_name_and_uri_default_to_each_other_and_identify_the_asset() -> None:
    plain = Asset("report")
    assert (plain.name, plain.uri) == ("report", "report")
    both = Asset(name="orders", uri="s3://shop/orders.csv", extra={"a": 1})
    assert both == Asset(name="orders", uri="s3://shop/orders.csv")
    assert both != Asset("s3://shop/orders.csv")
    with pytest.raises(DagDefinitionError, match=r"extra\['f'\].*cannot be stored as JSON"):
        Asset("x", extra={"f": print})


def test_conditions_combine_flatten_and_describe() -> None:
    a, b, c = Asset("a"), Asset("b"), Asset("c")
    cond = (a & b) & (c | AssetAlias("d"))
    assert isinstance(cond, AssetAll)
    assert len(cond.objects) == 3
    assert isinstance(cond.objects[2], AssetAny)
    with DAG("cond", schedule=cond) as d:
        EmptyOperator(task_id="t")
    assert d.parsed_schedule.description == "a & b & (c | alias:d)"
    with pytest.raises(TypeError, match="combines assets"):
        a & "b"  # type: ignore[operator]


def test_a_list_schedule_means_all_and_must_hold_assets() -> None:
    with DAG("listed", schedule=[Asset("a"), Asset("b")]) as d:
        EmptyOperator(task_id="t")
    assert d.parsed_schedule.description == "a & b"
    with pytest.raises(InvalidScheduleError, match=r"DAG 'bad_list'.*assets only, not '@daily'"):
        DAG("bad_list", schedule=[Asset("a"), "@daily"])  # type: ignore[list-item]
    with pytest.raises(InvalidScheduleError, match="empty list"):
        DAG("empty_list", schedule=[])


def test_an_asset_schedule_needs_no_start_date_and_serializes_its_condition() -> None:
    orders = Asset("s3://shop/orders.csv")
    with DAG("consumer", schedule=orders | Asset.ref(name="prices")) as d:
        EmptyOperator(task_id="t", inlets=[orders], outlets=[Asset("out"), AssetAlias("al")])
    data = serialize_dag(d)
    assert data.schedule.kind == "asset"
    assert data.schedule.condition is not None
    assert [leaf.kind for leaf in data.schedule.condition.leaves()] == ["asset", "ref"]
    assert sorted(a.name for a in data.assets) == ["out", "s3://shop/orders.csv"]
    assert [a.name for a in data.aliases] == ["al"]
    task_ = data.tasks[0]
    assert [o.kind for o in task_.outlets] == ["asset", "alias"]


def test_two_assets_sharing_a_name_are_a_definition_error() -> None:
    with DAG("clash", schedule=None) as d:
        EmptyOperator(task_id="a", outlets=[Asset(name="x", uri="s3://one")])
        EmptyOperator(task_id="b", outlets=[Asset(name="x", uri="s3://two")])
    with pytest.raises(DagDefinitionError, match="two different assets with the name 'x'"):
        serialize_dag(d)


def test_outlets_and_inlets_are_checked_naming_the_task() -> None:
    with DAG("bad_outlets", schedule=None):
        with pytest.raises(DagDefinitionError, match=r"outlets of task 'w'.*not 's3://x'"):
            EmptyOperator(task_id="w", outlets=["s3://x"])
        with pytest.raises(DagDefinitionError, match=r"outlets of task 'r'.*Asset\.ref"):
            EmptyOperator(task_id="r", outlets=[Asset.ref(name="x")])
        with pytest.raises(DagDefinitionError, match="inlets of task 'i'"):
            EmptyOperator(task_id="i", inlets=[42])


def test_outlet_and_inlet_accessors_in_the_context() -> None:
    from tailrace.execution import run_task_in_process

    orders = Asset("orders")
    seen: dict[str, Any] = {}

    @dag(schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC))
    def accessors() -> None:
        @task(outlets=[orders, AssetAlias("al")], inlets=[orders])
        def work(*, outlet_events: Any, inlet_events: Any, triggering_asset_events: Any) -> None:
            outlet_events[orders].extra["rows"] = 3
            outlet_events[AssetAlias("al")].add(Asset("dyn"), extra={"k": 1})
            seen["inlet_count"] = len(inlet_events[orders])
            seen["triggering"] = dict(triggering_asset_events)
            with pytest.raises(KeyError, match="not an outlet of task 'work'"):
                outlet_events[Asset("other")]
            with pytest.raises(KeyError, match="not an inlet of task 'work'"):
                inlet_events[Asset("other")]
            with pytest.raises(TypeError, match="only an AssetAlias adds assets"):
                outlet_events[orders].add(Asset("x"))

        work()

    result = run_task_in_process(accessors(), "work")
    assert result.outcome == "success", result.error
    assert seen == {"inlet_count": 0, "triggering": {}}


def test_the_asset_decorator_makes_an_asset_and_its_dag() -> None:
    @asset(schedule=None, uri="s3://shop/summary.parquet", start_date=datetime(2026, 1, 1))
    def summary(self: Any, context: Any) -> str:
        return self.name

    assert isinstance(summary, Asset)
    assert (summary.name, summary.uri) == ("summary", "s3://shop/summary.parquet")
    assert summary.dag.dag_id == "summary"
    (only,) = summary.dag.tasks
    assert only.task_id == "summary"
    assert only.outlets == [summary]
    with pytest.raises(DagDefinitionError, match="takes 'orders'"):

        @asset(schedule=None)
        def needs_inputs(orders: Any) -> None:
            pass
