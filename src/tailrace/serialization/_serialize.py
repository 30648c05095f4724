"""SDK objects to serialized structs. Runs only in the DAG parser; touches no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from tailrace.sdk import DAG, Param
from tailrace.sdk._assets import (
    Asset,
    AssetAlias,
    AssetAll,
    AssetAny,
    AssetRef,
    BaseAsset,
)
from tailrace.sdk._callbacks import CALLBACK_OF_STATE
from tailrace.sdk._deadline import AverageRuntimeDeadline, DeadlineAlert, FixedDatetimeDeadline
from tailrace.sdk._mapped import MappedOperator
from tailrace.sdk._node import AbstractOperator
from tailrace.sdk._types import ArgNotSet
from tailrace.sdk._xcom_arg import XComArg
from tailrace.sdk.errors import DagDefinitionError
from tailrace.sdk.triggers._base import resolve_start_trigger
from tailrace.serialization._json import dumps, loads
from tailrace.serialization._models import (
    AssetCondition,
    ExpandArg,
    SerializedAlias,
    SerializedAsset,
    SerializedDag,
    SerializedDeadline,
    SerializedParam,
    SerializedSchedule,
    SerializedStartTrigger,
    SerializedTask,
    SerializedWatcher,
    StreamSpec,
)


def _seconds(value: timedelta | None) -> float | None:
    return value.total_seconds() if value is not None else None


def _condition(obj: BaseAsset) -> AssetCondition:
    if isinstance(obj, Asset):
        return AssetCondition(kind="asset", name=obj.name, uri=obj.uri)
    if isinstance(obj, AssetAlias):
        return AssetCondition(kind="alias", name=obj.name)
    if isinstance(obj, AssetRef):
        return AssetCondition(kind="ref", name=obj.name, uri=obj.uri)
    if isinstance(obj, AssetAll | AssetAny):
        args = [_condition(o) for o in obj.objects]
        if isinstance(obj, AssetAll):
            return AssetCondition(kind="all", args=args)
        return AssetCondition(kind="any", args=args)
    raise TypeError(f"not an asset condition: {obj!r}")


def _asset(asset: Asset) -> SerializedAsset:
    watchers = []
    for watcher in asset.watchers:
        classpath, kwargs = watcher.trigger.serialize()
        watchers.append(
            SerializedWatcher(name=watcher.name, classpath=classpath, kwargs=dict(kwargs))
        )
    return SerializedAsset(
        name=asset.name, uri=asset.uri, group=asset.group, extra=asset.extra, watchers=watchers
    )


def _assets(dag: DAG) -> tuple[list[SerializedAsset], list[SerializedAlias]]:
    """Each asset and alias the DAG names, once; two different assets sharing a name or
    a URI are an error naming both."""
    leaves: list[BaseAsset] = []
    condition = dag.parsed_schedule.condition
    if condition is not None:
        leaves.extend(condition.iter_leaves())
    for task in dag.tasks:
        leaves.extend(getattr(task, "outlets", []))
        leaves.extend(getattr(task, "inlets", []))
    assets: dict[tuple[str, str], Asset] = {}
    aliases: dict[str, AssetAlias] = {}
    for leaf in leaves:
        if isinstance(leaf, Asset):
            known = assets.setdefault(leaf.key, leaf)
            if known is not leaf and leaf.watchers and not known.watchers:
                assets[leaf.key] = leaf
        elif isinstance(leaf, AssetAlias):
            aliases.setdefault(leaf.name, leaf)
    for what, index in (("name", 0), ("uri", 1)):
        seen: dict[str, Asset] = {}
        for asset in assets.values():
            other = seen.setdefault(asset.key[index], asset)
            if other is not asset:
                raise DagDefinitionError(
                    f"DAG '{dag.dag_id}' names two different assets with the {what} "
                    f"{asset.key[index]!r}: {other!r} and {asset!r}",
                    dag_id=dag.dag_id,
                    hint="An asset's name and URI each identify it: use one Asset object.",
                )
    return [_asset(a) for a in assets.values()], [
        SerializedAlias(name=a.name, group=a.group) for a in aliases.values()
    ]


def _schedule(dag: DAG) -> SerializedSchedule:
    parsed = dag.parsed_schedule
    if parsed.kind == "asset":
        assert parsed.condition is not None
        return SerializedSchedule(
            kind="asset", condition=_condition(parsed.condition), description=parsed.description
        )
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


def _deadline(dag_id: str, alert: DeadlineAlert, index: int, count: int) -> SerializedDeadline:
    reference = alert.reference
    kwargs = dict(alert.callback.kwargs)
    try:
        kwargs = loads(dumps(kwargs))
    except TypeError as exc:
        raise DagDefinitionError(
            f"the deadline callback's kwargs are not JSON-serializable ({exc})",
            dag_id=dag_id,
            field="deadline" if count == 1 else f"deadline[{index}]",
            hint="Pass strings, numbers, lists and dicts (a template string may name the "
            "run: '{{ dag_run.run_id }}').",
        ) from None
    return SerializedDeadline(
        reference=reference.reference_name,
        interval=alert.interval.total_seconds(),
        callback_kind=alert.callback.kind,
        callback_path=alert.callback.path,
        callback_kwargs=kwargs,
        name=alert.name,
        fixed=_instant(reference._datetime)
        if isinstance(reference, FixedDatetimeDeadline)
        else None,
        max_runs=reference.max_runs if isinstance(reference, AverageRuntimeDeadline) else None,
        min_runs=reference.min_runs if isinstance(reference, AverageRuntimeDeadline) else None,
    )


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


def _priority_weights(order: list[AbstractOperator]) -> dict[str, int]:
    """Each task's effective weight, as Airflow computes it: its own priority_weight, plus
    for "downstream" that of every task downstream of it (each counted once), for
    "upstream" every task upstream of it. Reach sets are bitmasks over the topological
    order: a 1,000-task DAG costs a few thousand integer ORs."""
    index = {t.task_id: i for i, t in enumerate(order)}
    weights = [t.priority_weight for t in order]
    rules = {t.weight_rule for t in order}
    below: list[int] = [0] * len(order)
    above: list[int] = [0] * len(order)
    if "downstream" in rules:
        for i in range(len(order) - 1, -1, -1):
            for down in order[i].downstream_task_ids:
                j = index[down]
                below[i] |= (1 << j) | below[j]
    if "upstream" in rules:
        for i, task in enumerate(order):
            for up in task.upstream_task_ids:
                j = index[up]
                above[i] |= (1 << j) | above[j]
    uniform = weights.count(1) == len(weights)
    result = {}
    for i, task in enumerate(order):
        rule = task.weight_rule
        reach = below[i] if rule == "downstream" else above[i] if rule == "upstream" else 0
        total = weights[i]
        if reach and uniform:
            total += reach.bit_count()
        elif reach:
            total += _sum_bits(reach, weights)
        result[task.task_id] = max(-(2**31), min(2**31 - 1, total)) if not uniform else total
    return result


def _sum_bits(mask: int, weights: list[int]) -> int:
    found, position = 0, 0
    while mask:
        if mask & 1:
            found += weights[position]
        mask >>= 1
        position += 1
    return found


def _task(task: AbstractOperator, dag_id: str, priority_weight: int) -> SerializedTask:
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
        pool_slots=task.pool_slots,
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
        priority_weight=priority_weight,
        depends_on_past=bool(task.depends_on_past or task.wait_for_downstream),
        wait_for_downstream=bool(task.wait_for_downstream),
        doc=task.doc_md or task.doc,
        ui_color=task.ui_color,
        outlets=[_condition(o) for o in getattr(task, "outlets", [])],
        inlets=[_condition(i) for i in getattr(task, "inlets", [])],
        is_setup=task.is_setup,
        is_teardown=task.is_teardown,
        on_failure_fail_dagrun=task.on_failure_fail_dagrun,
        callbacks=_end_callbacks(task),
        **extra,
    )


def _end_callbacks(task: AbstractOperator) -> list[str]:
    """The end-of-try callbacks ``task`` has (a mapped task's are among its partial
    arguments, for each instance)."""
    names = CALLBACK_OF_STATE.values()
    if isinstance(task, MappedOperator):
        return [name for name in names if task.partial_kwargs.get(name)]
    return [name for name in names if getattr(task, name, None)]


def serialize_dag(dag: DAG) -> SerializedDag:
    """Validate ``dag`` (raising its first definition error) and return its serialized form."""
    dag.validate()
    assets, aliases = _assets(dag)
    order = dag.topological_sort()
    weights = _priority_weights(order)
    return SerializedDag(
        assets=assets,
        aliases=aliases,
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
        stream_retention=_seconds(dag.stream_retention),
        has_on_success_callback=bool(dag.on_success_callback),
        has_on_failure_callback=bool(dag.on_failure_callback),
        deadlines=[
            _deadline(dag.dag_id, a, i, len(dag.deadline)) for i, a in enumerate(dag.deadline)
        ],
        params={name: _param(p) for name, p in dag.params.items_params()},
        tags=list(dag.tags),
        description=dag.description,
        doc_md=dag.doc_md,
        is_paused_upon_creation=dag.is_paused_upon_creation,
        tasks=[_task(t, dag.dag_id, weights[t.task_id]) for t in order],
        edge_info={
            up: {down: dict(info) for down, info in downs.items()}
            for up, downs in dag.edge_info.items()
        },
    )


def _operator_class(task: Any) -> type:
    """The class whose methods run: a mapped task's operator class, else the task's own."""
    return getattr(task, "operator_class", type(task))
