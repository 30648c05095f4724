"""The task context: what a running task knows about itself and its run."""

from __future__ import annotations

import contextlib
import dataclasses
import types
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypedDict

from tailrace.sdk import _macros
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
    # {{ var.value.key }} and {{ var.json.key }}
    var: dict[str, Any]
    # In an on_failure_callback or on_retry_callback: what the try raised.
    exception: BaseException


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
        when = coerce_datetime(datetime.now(UTC))
        assert when is not None
    if params is None:
        task_params = getattr(task, "params", None)
        source = task_params if task_params is not None else dag.params
        params = source.resolve(dag_run.conf, dag_id=dag.dag_id)
    return Context(
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
