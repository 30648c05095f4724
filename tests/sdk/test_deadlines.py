"""Deadline alerts as a DAG file writes them: Airflow 3.1's classes and arguments, and
what Tailrace refuses at parse time, naming the DAG, the argument and what to do."""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import tailrace
from tailrace import DAG, AsyncCallback, DeadlineAlert, DeadlineReference, SyncCallback
from tailrace.sdk.errors import DagDefinitionError, UnsupportedNameError
from tailrace.serialization import serialize_dag


def notify(context: Any, **kwargs: Any) -> None:
    pass


async def notify_async(context: Any, **kwargs: Any) -> None:
    pass


def _alert(**overrides: Any) -> DeadlineAlert:
    arguments: dict[str, Any] = {
        "reference": DeadlineReference.DAGRUN_QUEUED_AT,
        "interval": timedelta(minutes=15),
        "callback": SyncCallback(notify),
    }
    return DeadlineAlert(**{**arguments, **overrides})


def test_a_dag_keeps_its_alerts_and_serializes_them_by_path() -> None:
    fixed = datetime(2030, 1, 1, 9)
    dag = DAG(
        "timed",
        deadline=[
            _alert(name="queued", callback=SyncCallback(notify, kwargs={"text": "{{ dag_run }}"})),
            _alert(
                reference=DeadlineReference.FIXED_DATETIME(fixed),
                interval=timedelta(hours=-2),
                callback=AsyncCallback(notify_async),
            ),
            _alert(reference=DeadlineReference.AVERAGE_RUNTIME(min_runs=5)),
            _alert(
                reference=DeadlineReference.DAGRUN_LOGICAL_DATE,
                callback=SyncCallback(f"{__name__}.notify"),  # by path, as Airflow allows
            ),
        ],
    )
    assert len(dag.deadline) == 4
    serialized = serialize_dag(dag).deadlines
    assert [(d.reference, d.interval, d.callback_kind) for d in serialized] == [
        ("DagRunQueuedAtDeadline", 900.0, "sync"),
        ("FixedDatetimeDeadline", -7200.0, "async"),
        ("AverageRuntimeDeadline", 900.0, "sync"),
        ("DagRunLogicalDateDeadline", 900.0, "sync"),
    ]
    assert serialized[0].callback_path == f"{__name__}.notify"
    assert serialized[0].callback_kwargs == {"text": "{{ dag_run }}"}
    assert serialized[0].name == "queued"
    assert serialized[1].fixed == fixed.replace(tzinfo=UTC)  # naive is UTC, as elsewhere
    assert (serialized[2].max_runs, serialized[2].min_runs) == (10, 5)
    assert serialized[3].callback_path == f"{__name__}.notify"
    assert DAG("untimed").deadline == []


def _refused(alert: Any) -> DagDefinitionError:
    with pytest.raises(DagDefinitionError) as caught:
        DAG("ported", deadline=alert)
    assert caught.value.dag_id == "ported"
    assert caught.value.field == "deadline"
    assert "DAG 'ported'" in str(caught.value) and "deadline" in str(caught.value)
    return caught.value


REFUSED = [
    (_alert(reference="DAGRUN_QUEUED_AT"), "is not a deadline reference Tailrace knows"),
    (_alert(interval=timedelta(minutes=-5)), "the interval -0:05:00 is negative"),
    (_alert(interval=900), "the interval must be a timedelta"),
    (_alert(callback=notify), "callbacks of type function are not supported"),
    (_alert(callback=SyncCallback("json.decoder")), "'json.decoder' is <module"),
    (_alert(callback=SyncCallback("no_such_module.fn")), "cannot be imported"),
    (_alert(callback=SyncCallback("not a path")), "is not a dotted import path"),
    (_alert(callback=SyncCallback(lambda context: None)), "cannot be imported by path"),
    (_alert(callback=SyncCallback(functools.partial(notify))), "cannot be imported by path"),
    (_alert(callback=SyncCallback(notify_async)), "is an async function"),
    (_alert(callback=AsyncCallback(notify)), "is not awaitable"),
    (_alert(callback=SyncCallback(notify, executor="celery")), "executor='celery'"),
    (_alert(callback=SyncCallback(notify, kwargs={"context": 1})), "context is a reserved"),
    (
        _alert(reference=DeadlineReference.AVERAGE_RUNTIME(max_runs=3, min_runs=0)),
        "min_runs must be a whole number of at least 1",
    ),
    (_alert(reference=DeadlineReference.FIXED_DATETIME("tomorrow")), "takes a datetime"),
    ("in an hour", "must be a DeadlineAlert or a list of them"),
]


@pytest.mark.parametrize(("alert", "message"), REFUSED)
def test_what_tailrace_cannot_honour_is_refused_naming_the_dag_and_argument(
    alert: Any, message: str
) -> None:
    error = _refused(alert)
    assert message in str(error)
    assert error.hint, "says what to do"


def test_a_negative_interval_is_fine_before_a_fixed_moment() -> None:
    alert = _alert(reference=DeadlineReference.FIXED_DATETIME(datetime(2030, 1, 1)))
    alert.interval = timedelta(minutes=-30)
    assert DAG("before", deadline=alert).deadline == [alert]


def test_an_alert_in_a_list_is_named_by_its_index() -> None:
    with pytest.raises(DagDefinitionError) as caught:
        DAG("listed", deadline=[_alert(), _alert(interval=timedelta(minutes=-1))])
    assert caught.value.field == "deadline[1]"


def test_kwargs_must_be_json_serializable() -> None:
    dag = DAG("unjson", deadline=_alert(callback=SyncCallback(notify, kwargs={"x": object()})))
    with pytest.raises(DagDefinitionError, match="kwargs are not JSON-serializable") as caught:
        serialize_dag(dag)
    assert (caught.value.dag_id, caught.value.field) == ("unjson", "deadline")


def test_custom_references_are_refused_by_name_with_what_to_do() -> None:
    for name in ("BaseDeadlineReference", "deadline_reference"):
        with pytest.raises(UnsupportedNameError, match="DAGRUN_QUEUED_AT"):
            getattr(tailrace, name)
    with pytest.raises(UnsupportedNameError, match="register_custom_reference"):
        DeadlineReference.register_custom_reference(object)


def test_references_and_callbacks_compare_as_airflows_do() -> None:
    assert DeadlineReference.DAGRUN_QUEUED_AT == DeadlineReference.DAGRUN_QUEUED_AT
    fixed = datetime(2030, 1, 1, tzinfo=UTC)
    assert DeadlineReference.FIXED_DATETIME(fixed) == DeadlineReference.FIXED_DATETIME(fixed)
    assert DeadlineReference.DAGRUN_QUEUED_AT != DeadlineReference.DAGRUN_LOGICAL_DATE
    assert SyncCallback(notify).path == f"{__name__}.notify"
    assert SyncCallback(notify, kwargs={"a": 1}) == SyncCallback(f"{__name__}.notify", {"a": 1})
    assert (type(DeadlineReference.DAGRUN_QUEUED_AT),) == DeadlineReference.TYPES.DAGRUN_QUEUED
