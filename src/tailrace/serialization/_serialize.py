"""SDK objects to serialized structs. Runs only in the DAG parser; touches no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from tailrace.sdk import DAG, Param
from tailrace.sdk._mapped import MappedOperator
from tailrace.sdk._node import AbstractOperator
from tailrace.sdk._types import ArgNotSet
from tailrace.sdk._xcom_arg import XComArg
from tailrace.sdk.triggers._base import resolve_start_trigger
from tailrace.serialization._models import (
    ExpandArg,
    SerializedDag,
    SerializedParam,
    SerializedSchedule,
    SerializedStartTrigger,
    SerializedTask,
    StreamSpec,
)


def _seconds(value: timedelta | None) -> float | None:
    return value.total_seconds() if value is not None else None


def _schedule(dag: DAG) -> SerializedSchedule:
    parsed = dag.parsed_schedule
    if parsed.kind == "cron":
        return SerializedSchedule(kind="cron", value=parsed.cron, description=parsed.description)
    if parsed.kind == "delta":
        return SerializedSchedule(
            kind="delta", seconds=_seconds(parsed.delta), description=parsed.description
        )
    if parsed.kind == "once":
        return SerializedSchedule(kind="once", value="@once", description="@once")
    return SerializedSchedule(kind="none", description="manual runs only")


def _instant(value: datetime | None) -> datetime | None:
    """A plain ``datetime`` in UTC (a pendulum DateTime is a subclass msgspec refuses)."""
    if value is None:
        return None
    utc = value.astimezone(UTC)
    return datetime(*utc.timetuple()[:6], utc.microsecond, tzinfo=UTC)


def _param(param: Param) -> SerializedParam:
    has_default = not isinstance(param.value, ArgNotSet)
    return SerializedParam(
        default=param.value if has_default else None,
        has_default=has_default,
        schema=dict(param.schema),
        description=param.description,
    )


def _expand(task: MappedOperator) -> dict[str, ExpandArg]:
    result: dict[str, ExpandArg] = {}
    for name, value in task.expand_input.items():
        if isinstance(value, XComArg):
            result[name] = ExpandArg(task_id=value.operator.task_id, key=value.key)
        else:
            result[name] = ExpandArg(literal_length=len(value))
    return result


def _iterate(task: MappedOperator) -> StreamSpec:
    specs = [msgspec.convert(a.stream_spec(), StreamSpec) for a in task.iterate_args().values()]
    return specs[0] if len(specs) == 1 else StreamSpec(op="zip", args=specs)


def _start_trigger(task: AbstractOperator, dag_id: str) -> SerializedStartTrigger | None:
    args = resolve_start_trigger(task, dag_id=dag_id)
    if args is None:
        return None
    return SerializedStartTrigger(
        classpath=args.trigger_cls,
        kwargs=dict(args.trigger_kwargs or {}),
        next_method=args.next_method,
        next_kwargs=dict(args.next_kwargs or {}),
        timeout=_seconds(args.timeout),
    )


def _task(task: AbstractOperator, dag_id: str) -> SerializedTask:
    group = task.task_group
    extra: dict[str, Any] = {}
    if isinstance(task, MappedOperator):
        extra = {"is_mapped": True, "operator": task.operator_name}
        if task.lazy:
            spec = _iterate(task)
            extra.update(iterate=spec, iterate_sources=spec.source_task_ids())
        else:
            extra["expand"] = _expand(task)
    return SerializedTask(
        task_id=task.task_id,
        operator=extra.pop("operator", type(task).__name__),
        upstream=sorted(task.upstream_task_ids),
        downstream=sorted(task.downstream_task_ids),
        trigger_rule=str(task.trigger_rule),
        retries=task.retries,
        retry_delay=task.retry_delay.total_seconds(),
        retry_exponential_backoff=task.retry_exponential_backoff,
        max_retry_delay=_seconds(task.max_retry_delay),
        execution_timeout=_seconds(task.execution_timeout),
        queue=task.queue,
        pool=task.pool,
        max_active_tis_per_dag=task.max_active_tis_per_dag,
        max_active_tis_per_dagrun=getattr(task, "max_active_tis_per_dagrun", None),
        task_group=group.group_id if group is not None else None,
        xcom_refs=task.iter_xcom_dependencies(),
        start_trigger=_start_trigger(task, dag_id),
        max_batch_size=task.max_batch_size,
        max_batch_latency=task.max_batch_latency.total_seconds(),
        max_pending_events=task.max_pending_events,
        stream_retry=task.stream_retry,
        handles_events=callable(getattr(_operator_class(task), "handle_trigger_events", None)),
        doc=task.doc_md or task.doc,
        ui_color=task.ui_color,
        is_setup=task.is_setup,
        is_teardown=task.is_teardown,
        on_failure_fail_dagrun=task.on_failure_fail_dagrun,
        **extra,
    )


def serialize_dag(dag: DAG) -> SerializedDag:
    """Validate ``dag`` (raising its first definition error) and return its serialized form."""
    dag.validate()
    return SerializedDag(
        dag_id=dag.dag_id,
        fileloc=dag.fileloc,
        schedule=_schedule(dag),
        start_date=_instant(dag.start_date),
        end_date=_instant(dag.end_date),
        timezone=dag.timezone_name,
        catchup=dag.catchup,
        max_active_runs=dag.max_active_runs,
        max_active_tasks=dag.max_active_tasks,
        dagrun_timeout=_seconds(dag.dagrun_timeout),
        params={name: _param(p) for name, p in dag.params.items_params()},
        tags=list(dag.tags),
        description=dag.description,
        doc_md=dag.doc_md,
        is_paused_upon_creation=dag.is_paused_upon_creation,
        tasks=[_task(t, dag.dag_id) for t in dag.topological_sort()],
    )


def _operator_class(task: Any) -> type:
    """The class whose methods run: a mapped task's operator class, else the task's own."""
    return getattr(task, "operator_class", type(task))
