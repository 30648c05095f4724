from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from tailrace.sdk import (
    DAG,
    BashOperator,
    EmptyOperator,
    Label,
    Param,
    PythonOperator,
    TaskGroup,
    task,
)
from tailrace.sdk.errors import DagCycleError, DagDefinitionError
from tailrace.serialization import (
    ExpandArg,
    SerializedDag,
    SerializedParam,
    SerializedSchedule,
    serialize_dag,
)


def build() -> DAG:
    with DAG(
        "ser",
        "A description",
        schedule="@hourly",
        start_date=datetime(2024, 1, 1),
        end_date=datetime(2025, 1, 1),
        catchup=True,
        max_active_runs=2,
        max_active_tasks=3,
        tags=["b", "a"],
        doc_md="# Docs",
        is_paused_upon_creation=False,
        params={
            "n": Param(3, type="integer", minimum=0, description="count"),
            "req": Param(type="string"),
            "plain": "v",
        },
        default_args={"retries": 2, "retry_delay": timedelta(seconds=30)},
    ) as d:

        @task(multiple_outputs=True)
        def source() -> dict[str, list[int]]:
            return {"items": [1, 2], "other": [3]}

        @task
        def use(x: int, y: int) -> int:
            return x + y

        src = source()
        with TaskGroup("grp"):
            used = use.partial(y=src["other"]).expand(x=src["items"].map(lambda v: v + 1))
        literal = BashOperator.partial(task_id="lit", queue="q").expand(
            bash_command=["echo a", "echo b"], env=[{}, {}, {}]
        )
        final = PythonOperator(
            task_id="final",
            python_callable=print,
            op_args=[used],
            trigger_rule="all_done",
            execution_timeout=timedelta(minutes=2),
            max_retry_delay=timedelta(minutes=10),
            retry_exponential_backoff=True,
            max_active_tis_per_dag=4,
            doc_md="final",
        )
        literal >> final
    return d


def test_serialized_fields() -> None:
    s = serialize_dag(build())
    assert s.dag_id == "ser" and s.fileloc == __file__
    assert s.schedule == SerializedSchedule(kind="cron", value="0 * * * *", description="0 * * * *")
    assert s.start_date == datetime(2024, 1, 1, tzinfo=UTC)
    assert s.end_date == datetime(2025, 1, 1, tzinfo=UTC)
    assert (s.catchup, s.max_active_runs, s.max_active_tasks) == (True, 2, 3)
    assert s.dagrun_timeout is None
    assert s.tags == ["a", "b"]
    assert (s.description, s.doc_md) == ("A description", "# Docs")
    assert s.is_paused_upon_creation is False
    assert s.params == {
        "n": SerializedParam(
            default=3,
            has_default=True,
            schema={"type": "integer", "minimum": 0},
            description="count",
        ),
        "req": SerializedParam(default=None, has_default=False, schema={"type": "string"}),
        "plain": SerializedParam(default="v"),
    }
    assert [t.task_id for t in s.tasks] == ["source", "grp.use", "lit", "final"]

    src = s.task("source")
    assert src.operator == "_PythonDecoratedOperator"
    assert src.downstream == ["grp.use"] and src.upstream == []
    assert (src.retries, src.retry_delay) == (2, 30.0)
    assert not src.is_mapped and src.xcom_refs == []

    use = s.task("grp.use")
    assert use.task_group == "grp" and use.is_mapped
    assert use.upstream == ["source"] and use.downstream == ["final"]
    assert use.expand == {"x": ExpandArg(task_id="source", key="items")}
    assert sorted(use.xcom_refs) == [("source", "items"), ("source", "other")]

    lit = s.task("lit")
    assert lit.operator == "BashOperator" and lit.queue == "q"
    assert lit.expand == {
        "bash_command": ExpandArg(literal_length=2),
        "env": ExpandArg(literal_length=3),
    }

    final = s.task("final")
    assert final.operator == "PythonOperator"
    assert final.upstream == ["grp.use", "lit"]
    assert final.trigger_rule == "all_done"
    assert (final.execution_timeout, final.max_retry_delay) == (120.0, 600.0)
    assert final.retry_exponential_backoff and final.pool == "default_pool"
    assert final.max_active_tis_per_dag == 4 and final.doc == "final"
    assert final.xcom_refs == [("grp.use", "return_value")]
    assert final.ui_color == "#ffefeb" and final.task_group is None


def test_json_round_trip() -> None:
    s = serialize_dag(build())
    data = msgspec.json.encode(s)
    back = msgspec.json.decode(data, type=SerializedDag)
    assert back == s


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        (None, SerializedSchedule(kind="none", description="manual runs only")),
        ("@once", SerializedSchedule(kind="once", value="@once", description="@once")),
        ("@daily", SerializedSchedule(kind="cron", value="0 0 * * *", description="0 0 * * *")),
        (
            timedelta(hours=1),
            SerializedSchedule(kind="delta", seconds=3600.0, description="every 1:00:00"),
        ),
    ],
)
def test_schedule_kinds(schedule: object, expected: SerializedSchedule) -> None:
    d = DAG("s", schedule=schedule, start_date=datetime(2024, 1, 1))  # type: ignore[arg-type]
    assert serialize_dag(d).schedule == expected


def test_serialize_validates() -> None:
    with DAG("cyc") as d:
        a, b = EmptyOperator(task_id="a"), EmptyOperator(task_id="b")
        a >> b >> a
    with pytest.raises(DagCycleError):
        serialize_dag(d)


def test_pendulum_dates_params_and_defaults_serialize_with_the_dags_time_zone() -> None:
    import pendulum

    from tailrace.serialization import dumps, loads

    start = pendulum.datetime(2026, 3, 1, 9, tz="Europe/Amsterdam")
    with DAG(
        "pend",
        schedule="0 9 * * *",
        start_date=start,
        end_date=start.add(months=1),
        params={"since": Param(pendulum.datetime(2026, 1, 1))},
        default_args={"retry_delay": pendulum.duration(minutes=5)},
    ) as d:
        EmptyOperator(task_id="t", execution_timeout=pendulum.duration(hours=2))
    ser = msgspec.convert(loads(dumps(serialize_dag(d))), SerializedDag)
    assert d.timezone_name == ser.timezone == "Europe/Amsterdam"
    assert ser.start_date == datetime(2026, 3, 1, 8, tzinfo=UTC)
    assert ser.end_date == datetime(2026, 4, 1, 7, tzinfo=UTC)  # CEST by then
    assert ser.tasks[0].execution_timeout == 7200
    assert ser.params["since"].default == "2026-01-01T00:00:00Z"
    assert ser.tasks[0].retry_delay == 300


def test_a_naive_start_date_is_utc() -> None:
    with DAG("naive", schedule="@daily", start_date=datetime(2026, 1, 1)) as d:
        pass
    assert serialize_dag(d).timezone == "UTC"


def test_priority_weights_follow_airflows_weight_rules() -> None:
    #   a -> b -> d
    #   a -> c -> d      e (alone)
    with DAG("weights") as dag:
        a = EmptyOperator(task_id="a")
        b = EmptyOperator(task_id="b", priority_weight=3)
        c = EmptyOperator(task_id="c")
        d = EmptyOperator(task_id="d")
        EmptyOperator(task_id="e", priority_weight=7, weight_rule="absolute")
        up = EmptyOperator(task_id="up", weight_rule="upstream")
        a >> [b, c] >> d >> up
    weights = {t.task_id: t.priority_weight for t in serialize_dag(dag).tasks}
    # downstream (the default): itself plus each task below it once (d and up count once).
    assert weights["a"] == 1 + 3 + 1 + 1 + 1
    assert (weights["b"], weights["c"], weights["d"]) == (3 + 1 + 1, 1 + 1 + 1, 1 + 1)
    assert weights["e"] == 7
    # upstream: itself plus every task above it.
    assert weights["up"] == 1 + 1 + 3 + 1 + 1


def test_a_weight_rule_airflow_does_not_have_is_refused() -> None:
    with DAG("w"), pytest.raises(DagDefinitionError, match="weight_rule='sideways'"):
        EmptyOperator(task_id="t", weight_rule="sideways")
    with DAG("w2"), pytest.raises(DagDefinitionError, match="priority_weight must be"):
        EmptyOperator(task_id="t", priority_weight="high")


def test_edge_labels_are_serialized_as_airflow_does() -> None:
    with DAG("labelled", schedule=None, start_date=datetime(2024, 1, 1)) as d:
        check = EmptyOperator(task_id="check")
        check >> Label("rows look right") >> EmptyOperator(task_id="publish")
        check >> EmptyOperator(task_id="audit")
    serialized = serialize_dag(d)
    assert serialized.edge_info == {"check": {"publish": {"label": "rows look right"}}}
    decoded = msgspec.json.decode(msgspec.json.encode(serialized), type=SerializedDag)
    assert decoded.edge_info == serialized.edge_info
    assert sorted(serialized.task("audit").upstream) == ["check"]
