"""Airflow arguments Tailrace does not honour yet are refused at parse time, naming the
DAG, the task and the argument; their default values are accepted. Callback arguments
take a callable or a list of them."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from tailrace import DAG, dag, task
from tailrace.sdk.errors import DagDefinitionError, TailraceError, UnsupportedArgumentError
from tailrace.sdk.operators.empty import EmptyOperator
from tailrace.sdk.operators.python import PythonOperator

TASK_VALUES = [
    ("sla", timedelta(hours=1), "DeadlineAlert"),
]


@pytest.mark.parametrize(("field", "value", "hint"), TASK_VALUES)
def test_operator_refuses_an_ignored_value(field: str, value: Any, hint: str) -> None:
    with DAG("ported"), pytest.raises(UnsupportedArgumentError) as info:
        EmptyOperator(task_id="load", **{field: value})
    message = str(info.value)
    assert message.startswith(f"DAG 'ported', task 'load': {field}={value!r} is not supported")
    assert hint in message
    assert isinstance(info.value, TailraceError)
    assert (info.value.dag_id, info.value.task_id, info.value.field) == ("ported", "load", field)


@pytest.mark.parametrize(("field", "value", "hint"), TASK_VALUES)
def test_default_args_taskflow_and_mapped_tasks_are_refused_too(
    field: str, value: Any, hint: str
) -> None:
    with DAG("d", default_args={field: value}), pytest.raises(UnsupportedArgumentError):
        EmptyOperator(task_id="t")

    @task(**{field: value})
    def load() -> None:
        pass

    with DAG("tf"), pytest.raises(UnsupportedArgumentError, match="task 'load'"):
        load()
    with DAG("m"), pytest.raises(UnsupportedArgumentError, match="task 'm'"):
        PythonOperator.partial(task_id="m", python_callable=print, **{field: value}).expand(
            op_args=[[1]]
        )


def test_default_values_are_accepted() -> None:
    with DAG("d"):
        op = EmptyOperator(
            task_id="t",
            depends_on_past=False,
            wait_for_downstream=False,
            priority_weight=1,
            weight_rule="downstream",
            pool="default_pool",
            pool_slots=1,
            sla=None,
        )
    assert op.pool == "default_pool"


DAG_VALUES = [
    ("sla_miss_callback", print, "DeadlineAlert"),
]


@pytest.mark.parametrize(("field", "value", "hint"), DAG_VALUES)
def test_dag_refuses_an_ignored_value(field: str, value: Any, hint: str) -> None:
    with pytest.raises(UnsupportedArgumentError) as info:
        DAG("ported", **{field: value})
    assert str(info.value).startswith(f"DAG 'ported': {field}={value!r} is not supported")
    assert hint in str(info.value)
    assert (info.value.dag_id, info.value.task_id) == ("ported", None)

    @dag(schedule=None, start_date=datetime(2026, 1, 1), **{field: value})
    def decorated() -> None:
        pass

    with pytest.raises(UnsupportedArgumentError, match="DAG 'decorated'"):
        decorated()


def test_callbacks_are_lists_of_callables() -> None:
    def alert(context: Any) -> None:
        pass

    with DAG("d"):
        one = EmptyOperator(task_id="one", on_failure_callback=alert)
        two = EmptyOperator(task_id="two", on_retry_callback=[alert, print])
        none = EmptyOperator(task_id="none")
    assert one.on_failure_callback == [alert]
    assert two.on_retry_callback == [alert, print]
    assert none.on_success_callback == [] and none.on_execute_callback == []
    with DAG("d2"), pytest.raises(DagDefinitionError, match="on_success_callback must be"):
        EmptyOperator(task_id="bad", on_success_callback="send_alert")
    with DAG("d3"), pytest.raises(DagDefinitionError, match="task 'm'"):
        PythonOperator.partial(task_id="m", python_callable=print, on_skipped_callback=[1]).expand(
            op_args=[[1]]
        )


def test_dag_callbacks_are_lists_of_callables() -> None:
    def alert(context: Any) -> None:
        pass

    one = DAG("one", on_failure_callback=alert)
    two = DAG("two", on_success_callback=[alert, print])
    assert (one.on_failure_callback, one.on_success_callback) == ([alert], [])
    assert two.on_success_callback == [alert, print]
    with pytest.raises(DagDefinitionError, match=r"on_failure_callback must be .* \[DAG 'bad'\]"):
        DAG("bad", on_failure_callback="page_me")
