"""Dynamic task mapping: ``Operator.partial(...).expand(...)`` and its run-time unmapping."""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from tailrace.sdk._assets import check_inlets, check_outlets
from tailrace.sdk._baseoperator import (
    DEFAULT_MAX_BATCH_LATENCY,
    DEFAULT_MAX_BATCH_SIZE,
    DEFAULT_MAX_PENDING_EVENTS,
    DEFAULT_OWNER,
    DEFAULT_POOL,
    DEFAULT_QUEUE,
    DEFAULT_RETRY_DELAY,
    BaseOperator,
    merged_default_args,
)
from tailrace.sdk._callbacks import (
    TASK_CALLBACKS,
    as_callbacks,
    check_pool_slots,
    check_priority,
    refuse_ignored_task_args,
)
from tailrace.sdk._contextstack import current_dag, current_group
from tailrace.sdk._node import AbstractOperator, find_xcom_args
from tailrace.sdk._params import ParamsDict
from tailrace.sdk._trigger_rule import TriggerRule
from tailrace.sdk._types import as_timedelta, validate_id
from tailrace.sdk._xcom_arg import (
    ABSENT,
    BatchedXComArg,
    ConcatXComArg,
    FilterXComArg,
    XComArg,
    ZipXComArg,
    as_item_source,
    expand_items,
)
from tailrace.sdk.errors import DagDefinitionError, SkipTask

if TYPE_CHECKING:
    from tailrace.sdk._context import Context
    from tailrace.sdk._dag import DAG
    from tailrace.sdk._taskgroup import TaskGroup

# Arguments that identify or place a task; they cannot differ between mapped instances.
UNMAPPABLE = frozenset({"task_id", "dag", "task_group", "default_args", "params"})


def accepted_arguments(operator_class: type[BaseOperator]) -> set[str]:
    """The keyword arguments an operator's ``__init__`` chain accepts."""
    names: set[str] = set()
    for klass in operator_class.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        for name, p in inspect.signature(init).parameters.items():
            if name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                names.add(name)
    return names


def _argument_default(operator_class: type[BaseOperator], name: str, fallback: Any) -> Any:
    for klass in operator_class.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        param = inspect.signature(init).parameters.get(name)
        if param is not None and param.default is not inspect.Parameter.empty:
            return param.default
    return fallback


# Combinators whose length is unknown until items exist: only ``.iterate()`` takes them.
_LAZY_ONLY = (FilterXComArg, ZipXComArg, ConcatXComArg, BatchedXComArg)


def validate_expand_value(
    value: Any,
    *,
    name: str,
    task_id: str,
    dag_id: str | None,
    partial_kwargs: Mapping[str, Any] | None = None,
    method: str = "expand",
) -> None:
    """An ``expand()``/``iterate()`` argument: not also given to ``partial()``, and
    something to map over."""
    if partial_kwargs is not None and name in partial_kwargs:
        raise DagDefinitionError(
            f"Argument '{name}' was given to both partial() and {method}()",
            dag_id=dag_id,
            task_id=task_id,
            field=name,
            hint="Pass each argument to only one of them.",
        )
    if method == "expand" and isinstance(value, _LAZY_ONLY):
        raise DagDefinitionError(
            f"expand() cannot map over {value!r} for argument '{name}': its length is not "
            "known before it runs",
            dag_id=dag_id,
            task_id=task_id,
            field=name,
            hint="Use .iterate(...) instead: it creates instances as items arrive.",
        )
    if isinstance(value, XComArg | list | tuple | dict):
        return
    raise DagDefinitionError(
        f"{method}() got a {type(value).__name__} for argument '{name}'",
        dag_id=dag_id,
        task_id=task_id,
        field=name,
        hint=f"{method.capitalize()} over a list, a dict or an XComArg (task output).",
    )


def check_mapped_arguments(
    mapped_kwargs: Mapping[str, Any],
    *,
    method: str,
    task_id: str,
    dag_id: str | None,
    partial_kwargs: Mapping[str, Any],
    accepted: set[str] | None = None,
    operator_name: str = "",
) -> None:
    """Every check on ``expand()``/``iterate()`` arguments, for operators and TaskFlow."""
    if not mapped_kwargs:
        raise DagDefinitionError(
            f"{method}() needs at least one argument to map over",
            dag_id=dag_id,
            task_id=task_id,
            hint=f"Pass e.g. {method}(x=[1, 2, 3]).",
        )
    for name, value in mapped_kwargs.items():
        if accepted is not None and (name in UNMAPPABLE or name not in accepted):
            raise DagDefinitionError(
                f"{operator_name} cannot map over argument '{name}'",
                dag_id=dag_id,
                task_id=task_id,
                field=name,
                hint="Map only over arguments the operator accepts (not task_id, dag, "
                "task_group, default_args or params).",
            )
        validate_expand_value(
            value,
            name=name,
            task_id=task_id,
            dag_id=dag_id,
            partial_kwargs=partial_kwargs,
            method=method,
        )


class OperatorPartial:
    """The result of ``Operator.partial(**kwargs)``: call :meth:`expand` to map the task."""

    def __init__(self, operator_class: type[BaseOperator], kwargs: Mapping[str, Any]) -> None:
        if "task_id" not in kwargs:
            raise DagDefinitionError(
                f"{operator_class.__name__}.partial() needs a task_id",
                field="task_id",
                hint="Pass task_id= to partial().",
            )
        self.operator_class = operator_class
        self.kwargs = dict(kwargs)

    def __repr__(self) -> str:
        return f"{self.operator_class.__name__}.partial(task_id={self.kwargs['task_id']!r})"

    def expand(self, **mapped_kwargs: Any) -> MappedOperator:
        """Create one task instance per item (the cartesian product for several arguments).

        Values are lists, dicts (items are ``(key, value)`` pairs) or XComArgs resolved
        when the task runs. Every item must exist before the first instance is created.
        """
        return self._mapped("expand", mapped_kwargs)

    def iterate(self, **mapped_kwargs: Any) -> MappedOperator:
        """Create one task instance per item *as items arrive* (lazy expansion).

        Values are task outputs — a stream, a list, or a combination made with
        ``map``/``filter``/``zip``/``concat``/``batched`` — or plain lists. Several
        arguments are zipped: instance ``i`` gets item ``i`` of each. No length is ever
        needed: the instances of a stream's items run while the stream still flows.
        """
        return self._mapped("iterate", mapped_kwargs)

    def _mapped(self, method: str, mapped_kwargs: dict[str, Any]) -> MappedOperator:
        dag = self.kwargs.get("dag") or current_dag()
        check_mapped_arguments(
            mapped_kwargs,
            method=method,
            task_id=str(self.kwargs["task_id"]),
            dag_id=dag.dag_id if dag else None,
            partial_kwargs=self.kwargs,
            accepted=accepted_arguments(self.operator_class),
            operator_name=self.operator_class.__name__,
        )
        return MappedOperator(
            operator_class=self.operator_class,
            partial_kwargs=self.kwargs,
            expand_input=mapped_kwargs,
            lazy=method == "iterate",
        )


class MappedOperator(AbstractOperator):
    """A task expanded into one instance per item of its ``expand_input``.

    It takes part in the DAG like any task; at run time :meth:`unmap` builds the concrete
    operator for one map index.
    """

    is_mapped: ClassVar[bool] = True

    def __init__(
        self,
        *,
        operator_class: type[BaseOperator],
        partial_kwargs: Mapping[str, Any],
        expand_input: Mapping[str, Any],
        lazy: bool = False,
    ) -> None:
        partial = dict(partial_kwargs)
        # ``.iterate()``: instances are created as the arguments' items arrive.
        self.lazy = lazy
        dag: DAG | None = partial.pop("dag", None)
        group: TaskGroup | None = partial.pop("task_group", None)
        dag = dag or (group.dag if group is not None else None) or current_dag()
        group = group or current_group(dag)
        dag_id = dag.dag_id if dag else None
        accepted = accepted_arguments(operator_class)
        default_args = merged_default_args(dag, group, partial.pop("default_args", None))
        for name, value in default_args.items():
            if name in accepted and name not in partial and name not in expand_input:
                partial[name] = value
        raw_id = validate_id(partial["task_id"], kind="task", dag_id=dag_id)
        self.operator_class = operator_class
        self.partial_kwargs = partial
        self.expand_input: dict[str, Any] = dict(expand_input)
        self.task_group = group
        self.task_id = group.child_id(raw_id) if group else raw_id
        validate_id(self.task_id, kind="task", dag_id=dag_id)
        self.ui_color = operator_class.ui_color
        self.ui_fgcolor = operator_class.ui_fgcolor
        self._init_settings(dag_id)
        self.params = ParamsDict(partial.get("params"))
        self.upstream_task_ids = set()
        self.downstream_task_ids = set()
        self.dag = None
        if dag is not None:
            dag.add_task(self)
        self._set_xcomargs_dependencies()

    def _init_settings(self, dag_id: str | None) -> None:
        def get(name: str, fallback: Any) -> Any:
            if name in self.partial_kwargs:
                return self.partial_kwargs[name]
            return _argument_default(self.operator_class, name, fallback)

        refuse_ignored_task_args(self.partial_kwargs, dag_id=dag_id, task_id=self.task_id)
        for name in TASK_CALLBACKS:  # checked here; each mapped instance gets them
            as_callbacks(
                self.partial_kwargs.get(name), name=name, dag_id=dag_id, task_id=self.task_id
            )
        self.owner = get("owner", DEFAULT_OWNER)
        self.retries = int(get("retries", 0) or 0)
        delay = as_timedelta(get("retry_delay", DEFAULT_RETRY_DELAY))
        self.retry_delay = DEFAULT_RETRY_DELAY if delay is None else delay
        self.retry_exponential_backoff = bool(get("retry_exponential_backoff", False))
        self.max_retry_delay = as_timedelta(get("max_retry_delay", None))
        self.execution_timeout = as_timedelta(get("execution_timeout", None))
        self.trigger_rule = TriggerRule.parse(
            get("trigger_rule", TriggerRule.ALL_SUCCESS), task_id=self.task_id, dag_id=dag_id
        )
        self.queue = get("queue", DEFAULT_QUEUE)
        self.priority_weight, self.weight_rule = check_priority(
            get("priority_weight", 1),
            get("weight_rule", "downstream"),
            dag_id=dag_id,
            task_id=self.task_id,
        )
        self.wait_for_downstream = bool(get("wait_for_downstream", False))
        self.depends_on_past = bool(get("depends_on_past", False)) or self.wait_for_downstream
        self.pool = get("pool", None) or DEFAULT_POOL
        self.pool_slots = check_pool_slots(
            get("pool_slots", 1), dag_id=dag_id, task_id=self.task_id
        )
        self.max_active_tis_per_dag = get("max_active_tis_per_dag", None)
        self.max_active_tis_per_dagrun = get("max_active_tis_per_dagrun", None)
        self.max_batch_size = max(1, int(get("max_batch_size", DEFAULT_MAX_BATCH_SIZE)))
        self.max_batch_latency = as_timedelta(
            get("max_batch_latency", DEFAULT_MAX_BATCH_LATENCY)
        ) or timedelta(0)
        self.max_pending_events = max(1, int(get("max_pending_events", DEFAULT_MAX_PENDING_EVENTS)))
        self.stream_retry = str(get("stream_retry", "restart"))
        self.do_xcom_push = bool(get("do_xcom_push", True))
        self.multiple_outputs = bool(get("multiple_outputs", False))
        self.doc = get("doc", None)
        self.doc_md = get("doc_md", None)
        self.map_index_template = get("map_index_template", None)
        self.inlets = check_inlets(get("inlets", None), dag_id=dag_id, task_id=self.task_id)
        self.outlets = check_outlets(get("outlets", None), dag_id=dag_id, task_id=self.task_id)

    def __repr__(self) -> str:
        return f"<Mapped({self.operator_class.__name__}): {self.task_id}>"

    @property
    def operator_name(self) -> str:
        return self.operator_class.__name__

    def iter_xcom_args(self) -> Iterable[XComArg]:
        for value in self.partial_kwargs.values():
            yield from find_xcom_args(value)
        for value in self.expand_input.values():
            yield from find_xcom_args(value)

    # -- run time -----------------------------------------------------------------------

    def _resolve_items(self, context: Context) -> dict[str, Any]:
        items: dict[str, Any] = {}
        for name, value in self.expand_input.items():
            resolved = value.resolve(context) if isinstance(value, XComArg) else value
            try:
                items[name] = expand_items(resolved)
            except TypeError as exc:
                raise TypeError(
                    f"Mapped task '{self.task_id}' cannot expand argument '{name}': {exc}"
                ) from None
        return items

    def _xcom_sourced(self, mapped: Mapping[str, Any]) -> frozenset[int]:
        return frozenset(
            id(v) for k, v in mapped.items() if isinstance(self.expand_input[k], XComArg)
        )

    def get_mapped_length(self, context: Context) -> int:
        """How many instances the expansion produces (pulling upstream values)."""
        length = 1
        for items in self._resolve_items(context).values():
            length *= len(items)
        return length

    def iterate_args(self) -> dict[str, Any]:
        """The ``.iterate()`` arguments as item sources (plain lists wrapped)."""
        return {name: as_item_source(value) for name, value in self.expand_input.items()}

    def _iterated_kwargs(self, map_index: int, context: Context) -> dict[str, Any]:
        result = {}
        for name, arg in self.iterate_args().items():
            item = arg.item(map_index, context)
            if item is ABSENT:
                raise SkipTask(f"item {map_index} of argument '{name}' was filtered out by {arg!r}")
            result[name] = item
        return result

    def get_mapped_kwargs(self, map_index: int, context: Context) -> dict[str, Any]:
        """The expanded arguments of instance ``map_index``.

        Several arguments form a cartesian product in which the last argument varies
        fastest: ``expand(x=[1, 2], y=["a", "b"])`` gives (1, a), (1, b), (2, a), (2, b).
        ``.iterate()`` arguments are zipped instead: instance ``i`` gets item ``i`` of each.
        """
        if self.lazy:
            return self._iterated_kwargs(map_index, context)
        items = self._resolve_items(context)
        total = 1
        for values in items.values():
            total *= len(values)
        if not 0 <= map_index < total:
            raise IndexError(
                f"Map index {map_index} is out of range for mapped task '{self.task_id}' "
                f"with {total} instance(s)"
            )
        result: dict[str, Any] = {}
        index = map_index
        for name in reversed(list(items)):
            values = items[name]
            result[name] = values[index % len(values)]
            index //= len(values)
        return {name: result[name] for name in items}

    def _unmapped_kwargs(self, mapped: Mapping[str, Any]) -> dict[str, Any]:
        return {**self.partial_kwargs, **mapped}

    def unmap(self, context: Context) -> BaseOperator:
        """The concrete operator for ``context["ti"].map_index``."""
        mapped = self.get_mapped_kwargs(context["ti"].map_index, context)
        kwargs = self._unmapped_kwargs(mapped)
        kwargs.pop("default_args", None)
        cls = self.operator_class
        op = cls.__new__(cls)
        op._from_mapped = True
        op._resolved_oids = self._xcom_sourced(mapped)
        op.__init__(**kwargs, dag=self.dag, task_group=self.task_group)  # type: ignore[misc]
        op.task_id = self.task_id
        op.upstream_task_ids = set(self.upstream_task_ids)
        op.downstream_task_ids = set(self.downstream_task_ids)
        return op


class DecoratedMappedOperator(MappedOperator):
    """A mapped ``@task``: expanded values become arguments of the decorated function."""

    def _unmapped_kwargs(self, mapped: Mapping[str, Any]) -> dict[str, Any]:
        kwargs = dict(self.partial_kwargs)
        kwargs["op_kwargs"] = {**kwargs.get("op_kwargs", {}), **mapped}
        return kwargs
