from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from tailrace.sdk import DAG, BaseOperator, EmptyOperator, Param, dag, task
from tailrace.sdk._dag import pop_registered_dags
from tailrace.sdk.errors import (
    DagCycleError,
    DagDefinitionError,
    DuplicateTaskIdError,
    InvalidIdError,
    InvalidScheduleError,
    InvalidTriggerRuleError,
    ParamValidationError,
)


def test_context_manager_collects_tasks_and_registers_the_dag() -> None:
    pop_registered_dags()
    with DAG("reg") as d:
        a = EmptyOperator(task_id="a")
        b = EmptyOperator(task_id="b")
    outside = EmptyOperator(task_id="outside")
    assert d.tasks == [a, b]
    assert d.task_dict == {"a": a, "b": b}
    assert d.get_task("b") is b
    assert a.dag is d and outside.dag is None
    assert pop_registered_dags() == [d]
    assert pop_registered_dags() == []


def test_get_task_unknown_names_dag() -> None:
    with pytest.raises(KeyError, match="'nope' not found in DAG 'd'"):
        DAG("d").get_task("nope")


def test_naive_dates_are_utc_and_aware_dates_kept() -> None:
    tz = timezone(timedelta(hours=2))
    d = DAG("d", start_date=datetime(2024, 1, 1), end_date=datetime(2024, 2, 1, tzinfo=tz))
    assert d.start_date == datetime(2024, 1, 1, tzinfo=UTC)
    assert d.end_date is not None and d.end_date.utcoffset() == timedelta(hours=2)


def test_defaults() -> None:
    d = DAG("d")
    assert (d.schedule, d.catchup, d.max_active_runs, d.max_active_tasks) == (None, False, 16, 16)
    assert d.fileloc == __file__


def test_start_date_from_default_args() -> None:
    d = DAG("d", schedule="@daily", default_args={"start_date": datetime(2024, 1, 1)})
    assert d.start_date == datetime(2024, 1, 1, tzinfo=UTC)
    d.validate()


@pytest.mark.parametrize(
    ("schedule", "kind", "cron"),
    [
        (None, "none", None),
        ("@once", "once", None),
        ("@hourly", "cron", "0 * * * *"),
        ("@daily", "cron", "0 0 * * *"),
        ("@weekly", "cron", "0 0 * * 0"),
        ("@monthly", "cron", "0 0 1 * *"),
        ("@quarterly", "cron", "0 0 1 */3 *"),
        ("@yearly", "cron", "0 0 1 1 *"),
        ("@annually", "cron", "0 0 1 1 *"),
        ("*/5 * * * *", "cron", "*/5 * * * *"),
    ],
)
def test_schedules(schedule: str | None, kind: str, cron: str | None) -> None:
    d = DAG("d", schedule=schedule, start_date=datetime(2024, 1, 1))
    assert (d.parsed_schedule.kind, d.parsed_schedule.cron) == (kind, cron)


def test_timedelta_schedule() -> None:
    d = DAG("d", schedule=timedelta(hours=1), start_date=datetime(2024, 1, 1))
    assert d.parsed_schedule.kind == "delta"
    assert d.parsed_schedule.delta == timedelta(hours=1)


@pytest.mark.parametrize("bad", ["* * *", "61 * * * *", "@fortnightly", "not cron at all"])
def test_invalid_cron_names_dag_and_string(bad: str) -> None:
    with pytest.raises(InvalidScheduleError) as info:
        DAG("sched_dag", schedule=bad)
    message = str(info.value)
    assert "sched_dag" in message and repr(bad) in message
    assert info.value.dag_id == "sched_dag" and info.value.field == "schedule"
    assert "cron expression" in message  # says what to do


def test_non_positive_timedelta_schedule_is_invalid() -> None:
    with pytest.raises(InvalidScheduleError, match="positive"):
        DAG("d", schedule=timedelta(0))


@pytest.mark.parametrize("bad", ["", "has space", "slash/id", "x" * 251, "ünï"])
def test_invalid_dag_ids(bad: str) -> None:
    with pytest.raises(InvalidIdError) as info:
        DAG(bad)
    assert info.value.field == "dag_id"
    assert "letters, digits" in str(info.value)


def test_valid_id_characters() -> None:
    DAG("A-z_0.9")
    DAG("x" * 250)


def test_invalid_task_id_names_dag_and_task() -> None:
    with DAG("tid_dag"), pytest.raises(InvalidIdError) as info:
        EmptyOperator(task_id="bad id")
    assert info.value.dag_id == "tid_dag"
    assert info.value.task_id == "bad id"
    assert "'bad id'" in str(info.value) and "tid_dag" in str(info.value)


def test_duplicate_task_id_raised_when_added() -> None:
    with DAG("dup_dag"):
        EmptyOperator(task_id="same")
        with pytest.raises(DuplicateTaskIdError) as info:
            EmptyOperator(task_id="same")
    assert info.value.dag_id == "dup_dag" and info.value.task_id == "same"
    assert "'same'" in str(info.value) and "'dup_dag'" in str(info.value)


def test_cycle_error_names_the_path() -> None:
    with DAG("cyc") as d:
        a, b, c = (EmptyOperator(task_id=t) for t in "abc")
        a >> b >> c >> a
    with pytest.raises(DagCycleError) as info:
        d.validate()
    assert info.value.dag_id == "cyc"
    assert "a -> b -> c -> a" in str(info.value)
    assert info.value.cycle == ["a", "b", "c", "a"]
    with pytest.raises(DagCycleError):
        d.topological_sort()


def test_self_dependency_is_a_cycle() -> None:
    with DAG("selfcyc") as d:
        a = EmptyOperator(task_id="a")
        a >> a
    with pytest.raises(DagCycleError, match="a -> a"):
        d.validate()


def test_topological_sort_respects_dependencies_and_insertion_order() -> None:
    with DAG("topo") as d:
        c, b, a, _z = (EmptyOperator(task_id=t) for t in "cbaz")
        a >> b >> c
    assert [t.task_id for t in d.topological_sort()] == ["a", "b", "c", "z"]
    assert {t.task_id for t in d.roots} == {"a", "z"}
    assert {t.task_id for t in d.leaves} == {"c", "z"}


def test_scheduled_dag_needs_start_date() -> None:
    d = DAG("nostart", schedule="@daily")
    with pytest.raises(DagDefinitionError) as info:
        d.validate()
    assert info.value.field == "start_date" and "nostart" in str(info.value)
    DAG("manual").validate()


def test_end_date_before_start_date() -> None:
    d = DAG("ends", start_date=datetime(2024, 2, 1), end_date=datetime(2024, 1, 1))
    with pytest.raises(DagDefinitionError) as info:
        d.validate()
    assert info.value.field == "end_date" and "ends" in str(info.value)


def test_validate_checks_param_defaults() -> None:
    d = DAG("pdag", params={"n": Param("five", type="integer")})
    with pytest.raises(ParamValidationError) as info:
        d.validate()
    assert info.value.param == "n" and info.value.dag_id == "pdag"
    assert "'n'" in str(info.value) and "pdag" in str(info.value) and "integer" in str(info.value)


def test_validate_allows_param_without_default() -> None:
    DAG("d", params={"n": Param(type="integer")}).validate()


def test_validate_rechecks_trigger_rules() -> None:
    with DAG("trd") as d:
        t = EmptyOperator(task_id="t")
    t.trigger_rule = "sometimes"  # type: ignore[assignment]
    with pytest.raises(InvalidTriggerRuleError, match="'t'"):
        d.validate()


def test_dag_decorator_builds_dag_on_call() -> None:
    @dag(schedule="@hourly", start_date=datetime(2024, 1, 1), tags=["x", "a"])
    def my_pipeline() -> None:
        """Short description.

        Longer text."""

        @task
        def one() -> int:
            return 1

        one()

    pop_registered_dags()
    d = my_pipeline()
    assert d.dag_id == "my_pipeline"
    assert d.task_ids == ["one"]
    assert d.tags == ["a", "x"]
    assert d.description == "Short description."
    assert d.fileloc == __file__
    assert pop_registered_dags() == [d]


def test_dag_decorator_without_parentheses_and_with_id() -> None:
    @dag
    def plain() -> None:
        pass

    @dag("custom_id")
    def named() -> None:
        pass

    assert plain().dag_id == "plain"
    assert named().dag_id == "custom_id"


def test_operator_needs_keyword_arguments() -> None:
    class Op(BaseOperator):
        def __init__(self, x: int, **kwargs: object) -> None:
            super().__init__(**kwargs)  # type: ignore[arg-type]

        def execute(self, context: object) -> None:
            return None

    with DAG("d"), pytest.raises(TypeError, match="keyword arguments"):
        Op(1, task_id="t")  # type: ignore[misc]


def test_unknown_operator_argument_is_reported() -> None:
    with DAG("unk"), pytest.raises(DagDefinitionError) as info:
        EmptyOperator(task_id="t", retriez=3)
    assert info.value.field == "retriez" and "EmptyOperator" in str(info.value)


def test_dag_function_parameters_become_params(runner: Any) -> None:
    @dag(params={"limit": Param(1, type="integer", minimum=0)})
    def with_params(limit: int = 10, label: str = "x") -> None:
        @task
        def show(limit: int, label: str) -> str:
            return f"{label}:{limit}"

        show(limit, label)

    d = with_params(label="y")
    assert dict(d.params) == {"limit": 10, "label": "y"}
    assert d.params.get_param("limit").schema == {"type": "integer", "minimum": 0}
    assert runner(d).run("show") == "y:10"
    assert runner(d, conf={"limit": 3}).run("show") == "y:3"
    with pytest.raises(ParamValidationError, match="'limit'"):
        runner(d, conf={"limit": -1}).run("show")


def test_an_operator_that_starts_from_its_trigger_needs_no_execute() -> None:
    from tailrace.sdk import StartTriggerArgs
    from tailrace.serialization import serialize_dag

    class WaitOperator(BaseOperator):
        start_from_trigger = True
        start_trigger_args = StartTriggerArgs(
            trigger_cls="tailrace.sdk.triggers.DateTimeTrigger",
            trigger_kwargs={"moment": "2026-01-01T00:00:00+00:00"},
        )

    with DAG("from_trigger", schedule=None) as d:
        WaitOperator(task_id="wait")
    assert serialize_dag(d).tasks[0].start_trigger is not None


def test_an_operator_without_execute_that_does_not_start_from_a_trigger_is_refused() -> None:
    class Nothing(BaseOperator):
        pass

    with DAG("no_execute", schedule=None) as d:
        Nothing(task_id="idle")
    with pytest.raises(DagDefinitionError, match=r"'idle' \(Nothing\) defines no execute") as info:
        d.validate()
    assert (info.value.dag_id, info.value.task_id) == ("no_execute", "idle")
