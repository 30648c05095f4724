"""The task context: what a running task knows about itself and its run."""

from __future__ import annotations

import contextlib
import dataclasses
import types
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypedDict

from tailrace.sdk import _clock as clock
from tailrace.sdk import _macros
from tailrace.sdk._assets import (
    AssetEvent,
    InletEventsAccessors,
    OutletEventAccessors,
    TriggeringAssetEvents,
)
from tailrace.sdk._runtime import DagRunInfo, RuntimeTaskInstance
from tailrace.sdk.timezone import coerce_datetime
from tailrace.sdk.variables import VariableAccessor

if TYPE_CHECKING:
    from tailrace.sdk._dag import DAG
    from tailrace.sdk._node import AbstractOperator


class Context(TypedDict, total=False):
    """The keys available to a running task (and to its Jinja templates)."""

    dag: DAG
    task: AbstractOperator
    ti: RuntimeTaskInstance
    task_instance: RuntimeTaskInstance
    run_id: str
    dag_run: DagRunInfo
    logical_date: datetime | None
    data_interval_start: datetime | None
    data_interval_end: datetime | None
    ds: str
    ds_nodash: str
    ts: str
    ts_nodash: str
    ts_nodash_with_tz: str
    params: dict[str, Any]
    conf: dict[str, Any]
    map_index: int
    try_number: int
    test_mode: bool
    macros: types.ModuleType
    templates_dict: dict[str, Any] | None
    # Assets: the events this task emits on success, its inlets' events, and the events
    # that started this run (an asset-triggered run).
    outlet_events: OutletEventAccessors
    inlet_events: InletEventsAccessors
    triggering_asset_events: TriggeringAssetEvents
    # {{ var.value.key }} and {{ var.json.key }}
    var: dict[str, Any]
    # In an on_failure_callback or on_retry_callback: what the try raised.
    exception: BaseException
    # In a DAG's callbacks: why the run ended ("success", "task_failure", "timed_out").
    reason: str


_VARIABLE_ACCESSORS: dict[str, Any] = {
    "value": VariableAccessor(deserialize_json=False),
    "json": VariableAccessor(deserialize_json=True),
}

_current_context: ContextVar[Context | None] = ContextVar("tailrace_task_context", default=None)


def get_current_context() -> Context:
    """The context of the task running now (for code that did not receive it as an argument).

    Raises ``RuntimeError`` outside a running task.
    """
    context = _current_context.get()
    if context is None:
        raise RuntimeError(
            "get_current_context() was called outside a running task; it only works while "
            "a task's execute() (or @task function) runs."
        )
    return context


@contextlib.contextmanager
def set_current_context(context: Context) -> Iterator[Context]:
    """Make ``context`` what :func:`get_current_context` returns within the block."""
    token = _current_context.set(context)
    try:
        yield context
    finally:
        _current_context.reset(token)


def build_dag_run_context(
    *, dag: DAG, dag_run: DagRunInfo, reason: str, params: Mapping[str, Any] | None = None
) -> Context:
    """The context of a DAG's ``on_success_callback`` / ``on_failure_callback``: the run's
    keys (``dag``, ``dag_run``, ``run_id``, ``logical_date``, ``ds``, ``params`` …) and
    ``reason``, with no task or task instance."""
    run = _pendulum_dates(dag_run)
    when = _reference_date(run)
    if params is None:
        params = dag.params.resolve(run.conf, dag_id=dag.dag_id)
    context = Context(dag=dag, run_id=run.run_id, dag_run=run, reason=reason)
    context.update(_run_keys(run, when, params))  # type: ignore[typeddict-item]
    return context


def _pendulum_dates(dag_run: DagRunInfo) -> DagRunInfo:
    # Dates are pendulum DateTimes, as Airflow gives them (``logical_date.add(days=1)``).
    return dataclasses.replace(
        dag_run,
        logical_date=coerce_datetime(dag_run.logical_date),
        data_interval_start=coerce_datetime(dag_run.data_interval_start),
        data_interval_end=coerce_datetime(dag_run.data_interval_end),
        start_date=coerce_datetime(dag_run.start_date),
    )


def _reference_date(dag_run: DagRunInfo) -> datetime:
    when = dag_run.logical_date or dag_run.data_interval_start or dag_run.start_date
    if when is None:
        when = coerce_datetime(clock.utcnow())
        assert when is not None
    return when


def _run_keys(dag_run: DagRunInfo, when: datetime, params: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "logical_date": dag_run.logical_date,
        "data_interval_start": dag_run.data_interval_start,
        "data_interval_end": dag_run.data_interval_end,
        "ds": when.strftime("%Y-%m-%d"),
        "ds_nodash": when.strftime("%Y%m%d"),
        "ts": when.isoformat(),
        "ts_nodash": when.strftime("%Y%m%dT%H%M%S"),
        "ts_nodash_with_tz": when.isoformat().replace("-", "").replace(":", ""),
        "params": dict(params),
        "conf": dict(dag_run.conf),
        "macros": _macros,
    }


def build_context(
    *,
    dag: DAG,
    task: AbstractOperator,
    ti: RuntimeTaskInstance,
    dag_run: DagRunInfo,
    params: Mapping[str, Any] | None = None,
    test_mode: bool = False,
) -> Context:
    """Build the context of a task instance, deriving ``ds``, ``ts`` and friends.

    The reference date is the run's logical date, else its data interval start, else its
    start date (else now). ``params`` are the final values; when ``None`` they are
    resolved from the DAG's and task's params with the run's conf overriding them.
    """
    # Dates are pendulum DateTimes, as Airflow gives them (``logical_date.add(days=1)``).
    dag_run = dataclasses.replace(
        dag_run,
        logical_date=coerce_datetime(dag_run.logical_date),
        data_interval_start=coerce_datetime(dag_run.data_interval_start),
        data_interval_end=coerce_datetime(dag_run.data_interval_end),
        start_date=coerce_datetime(dag_run.start_date),
    )
    when = dag_run.logical_date or dag_run.data_interval_start or dag_run.start_date
    if when is None:
        when = coerce_datetime(clock.utcnow())
        assert when is not None
    if params is None:
        task_params = getattr(task, "params", None)
        source = task_params if task_params is not None else dag.params
        params = source.resolve(dag_run.conf, dag_id=dag.dag_id)
    fetch = getattr(ti, "fetch_asset_events", None) or _no_asset_events
    fetch_triggering: Callable[[], list[AssetEvent]] = getattr(
        ti, "fetch_triggering_asset_events", None
    ) or (lambda: [])
    return Context(
        outlet_events=OutletEventAccessors(getattr(task, "outlets", []), task.task_id),
        inlet_events=InletEventsAccessors(getattr(task, "inlets", []), task.task_id, fetch),
        triggering_asset_events=TriggeringAssetEvents(fetch_triggering),
        dag=dag,
        task=task,
        ti=ti,
        task_instance=ti,
        run_id=dag_run.run_id,
        dag_run=dag_run,
        logical_date=dag_run.logical_date,
        data_interval_start=dag_run.data_interval_start,
        data_interval_end=dag_run.data_interval_end,
        ds=when.strftime("%Y-%m-%d"),
        ds_nodash=when.strftime("%Y%m%d"),
        ts=when.isoformat(),
        ts_nodash=when.strftime("%Y%m%dT%H%M%S"),
        ts_nodash_with_tz=when.isoformat().replace("-", "").replace(":", ""),
        params=dict(params),
        conf=dict(dag_run.conf),
        map_index=ti.map_index,
        try_number=ti.try_number,
        test_mode=test_mode,
        macros=_macros,
        templates_dict=None,
        var=_VARIABLE_ACCESSORS,
    )


def _no_asset_events(
    name: str | None, alias: str | None, offset: int, limit: int
) -> tuple[int, list[AssetEvent]]:
    """A runtime without a metadata database (``tailrace tasks test``) has no events."""
    return 0, []
