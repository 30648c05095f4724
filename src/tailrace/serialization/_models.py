"""Structs of a serialized DAG. Everything here is plain data: no user code, no callables."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, Literal

import msgspec


class AssetCondition(msgspec.Struct, frozen=True, kw_only=True):
    """An asset schedule's condition, or one outlet or inlet: "asset" (``name`` and
    ``uri``), "alias" (``name``), "ref" (an asset by ``name`` or ``uri``, defined
    elsewhere), or "all"/"any" of ``args``."""

    kind: Literal["asset", "alias", "ref", "all", "any"]
    name: str | None = None
    uri: str | None = None
    args: list[AssetCondition] = msgspec.field(default_factory=list)

    def leaves(self) -> list[AssetCondition]:
        if self.kind in ("all", "any"):
            return [leaf for arg in self.args for leaf in arg.leaves()]
        return [self]


class SerializedWatcher(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    classpath: str
    kwargs: dict[str, Any] = msgspec.field(default_factory=dict)


class SerializedAsset(msgspec.Struct, frozen=True, kw_only=True):
    """An asset a DAG defines (in its schedule, outlets or inlets)."""

    name: str
    uri: str
    group: str = "asset"
    extra: dict[str, Any] = msgspec.field(default_factory=dict)
    watchers: list[SerializedWatcher] = msgspec.field(default_factory=list)


class SerializedAlias(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    group: str = "asset"


class SerializedSchedule(msgspec.Struct, frozen=True, kw_only=True):
    # "none": manual only; "cron": ``value`` is a cron expression (presets already expanded
    # to cron, "@once" kept as "once"); "delta": ``seconds`` between runs; "asset": runs
    # when ``condition`` holds over the asset events queued for the DAG.
    kind: Literal["none", "cron", "delta", "once", "asset"]
    value: str | None = None
    seconds: float | None = None
    description: str = ""
    condition: AssetCondition | None = None


class SerializedParam(msgspec.Struct, frozen=True, kw_only=True):
    default: Any = None
    has_default: bool = True
    schema: dict[str, Any] = msgspec.field(default_factory=dict)
    description: str | None = None


class ExpandArg(msgspec.Struct, frozen=True, kw_only=True):
    """One ``.expand()`` argument: a literal of known length or an upstream XCom."""

    literal_length: int | None = None
    task_id: str | None = None
    key: str = "return_value"


class StreamSpec(msgspec.Struct, frozen=True, kw_only=True):
    """The shape of an ``.iterate()`` argument: enough to count items, no callables.

    ``source``: an upstream task's output (its stream, its list, or — for a mapped task —
    one item per instance); ``literal``: a list in the DAG file of ``length`` items;
    ``map``/``filter``: same indexes as ``args[0]`` (a filtered item becomes a skipped
    instance); ``zip``: the shortest of ``args``; ``concat``: one after another;
    ``batched``: ``n`` items of ``args[0]`` per instance.
    """

    op: Literal["source", "literal", "map", "filter", "zip", "concat", "batched"]
    task_id: str | None = None
    key: str = "return_value"
    length: int | None = None
    n: int | None = None
    args: list[StreamSpec] = msgspec.field(default_factory=list)

    def uses(self, op: str) -> bool:
        """Whether this shape applies ``op`` anywhere."""
        return self.op == op or any(arg.uses(op) for arg in self.args)

    def source_task_ids(self) -> list[str]:
        found = [self.task_id] if self.op == "source" and self.task_id else []
        for arg in self.args:
            found.extend(t for t in arg.source_task_ids() if t not in found)
        return found


class SerializedStartTrigger(msgspec.Struct, frozen=True, kw_only=True):
    """A task that starts in the triggerer (``start_from_trigger``): no worker to begin."""

    classpath: str
    kwargs: dict[str, Any] = msgspec.field(default_factory=dict)
    # None: the trigger's event ends the task (success unless it is a failure event).
    next_method: str | None = None
    next_kwargs: dict[str, Any] = msgspec.field(default_factory=dict)
    timeout: float | None = None


class SerializedTask(msgspec.Struct, frozen=True, kw_only=True):
    task_id: str
    operator: str
    upstream: list[str] = msgspec.field(default_factory=list)
    downstream: list[str] = msgspec.field(default_factory=list)
    trigger_rule: str = "all_success"
    retries: int = 0
    retry_delay: float = 300.0
    retry_exponential_backoff: bool = False
    max_retry_delay: float | None = None
    execution_timeout: float | None = None
    queue: str = "default"
    pool: str = "default_pool"
    pool_slots: int = 1
    max_active_tis_per_dag: int | None = None
    task_group: str | None = None
    # Classic mapping: arguments by name; the instance count is their product.
    is_mapped: bool = False
    expand: dict[str, ExpandArg] = msgspec.field(default_factory=dict)
    # Lazy mapping (``.iterate()``): the items' shape (several arguments zipped); instances
    # are created as the source tasks' items arrive, so those upstreams need not finish.
    iterate: StreamSpec | None = None
    iterate_sources: list[str] = msgspec.field(default_factory=list)
    max_active_tis_per_dagrun: int | None = None
    # XCom references the task resolves at run time: (task_id, key) pairs.
    xcom_refs: list[tuple[str, str]] = msgspec.field(default_factory=list)
    start_trigger: SerializedStartTrigger | None = None
    # Streaming consumption (see BaseOperator): batch size and latency, backpressure.
    max_batch_size: int = 100
    max_batch_latency: float = 0.05
    max_pending_events: int = 1000
    # A retry of a stream consumer: "restart" the trigger run, or "resume" after the ack.
    stream_retry: str = "restart"
    # Consumes a stream in batches: handle_trigger_events(events, context).
    handles_events: bool = False
    # Runs only once its instance in the previous run succeeded or was skipped (and, with
    # wait_for_downstream, that instance's direct downstream instances too).
    # Its effective priority: its priority_weight with its weight_rule applied (downstream:
    # plus every downstream task's; upstream: plus every upstream task's). Dispatch takes
    # higher weights first when slots are short.
    priority_weight: int = 1
    depends_on_past: bool = False
    wait_for_downstream: bool = False
    doc: str | None = None
    ui_color: str = "#fff"
    # Assets: updated when the task succeeds (assets and aliases), and read.
    outlets: list[AssetCondition] = msgspec.field(default_factory=list)
    inlets: list[AssetCondition] = msgspec.field(default_factory=list)
    # Setup and teardown tasks: a teardown runs after failed work (all_done_setup_success)
    # and decides the run's state only with on_failure_fail_dagrun.
    is_setup: bool = False
    is_teardown: bool = False
    on_failure_fail_dagrun: bool = False
    # The end-of-try callbacks the task has ("on_failure_callback", ...): a try that ends
    # without a worker (a deferral timeout, a lost worker) asks one to run them.
    callbacks: list[str] = msgspec.field(default_factory=list)


class SerializedDeadline(msgspec.Struct, frozen=True, kw_only=True):
    """A DeadlineAlert: its reference (Airflow's class name, with its arguments), the
    interval, and the callback by import path (the callable stays in its module)."""

    reference: str
    interval: float  # seconds; negative only for a fixed moment
    callback_kind: str  # "sync" (a worker) | "async" (the triggerer)
    callback_path: str
    callback_kwargs: dict[str, Any] = msgspec.field(default_factory=dict)
    name: str | None = None
    fixed: datetime | None = None  # FixedDatetimeDeadline
    max_runs: int | None = None  # AverageRuntimeDeadline
    min_runs: int | None = None

    @property
    def counts_from_queued(self) -> bool:
        """Computed each time the run is queued (Airflow's TYPES.DAGRUN_QUEUED), not once
        as it is created."""
        return self.reference == "DagRunQueuedAtDeadline"


# dict=True: room for the task index ``task()`` builds once (not a field; never encoded).
class SerializedDag(msgspec.Struct, frozen=True, kw_only=True, dict=True):
    dag_id: str
    fileloc: str
    schedule: SerializedSchedule
    # UTC instants; ``timezone`` is the zone cron schedules are read in (the start_date's).
    start_date: datetime | None = None
    end_date: datetime | None = None
    timezone: str = "UTC"
    catchup: bool = False
    max_active_runs: int = 16
    max_active_tasks: int = 16
    dagrun_timeout: float | None = None
    # Seconds a finished run's streams are kept (None: the stream_retention_seconds setting).
    stream_retention: float | None = None
    # The DAG has on_success_callback / on_failure_callback: a finished run asks a worker
    # to run them (the callables stay in the DAG file).
    has_on_success_callback: bool = False
    has_on_failure_callback: bool = False
    deadlines: list[SerializedDeadline] = msgspec.field(default_factory=list)
    params: dict[str, SerializedParam] = msgspec.field(default_factory=dict)
    tags: list[str] = msgspec.field(default_factory=list)
    description: str | None = None
    doc_md: str | None = None
    is_paused_upon_creation: bool | None = None
    # In topological order.
    tasks: list[SerializedTask] = msgspec.field(default_factory=list)
    # Edge labels (``a >> Label("on success") >> b``), as Airflow serializes them:
    # upstream task id -> downstream task id -> {"label": ...}.
    edge_info: dict[str, dict[str, dict[str, str]]] = msgspec.field(default_factory=dict)
    # Every asset and alias the DAG names (schedule, outlets, inlets), once each.
    assets: list[SerializedAsset] = msgspec.field(default_factory=list)
    aliases: list[SerializedAlias] = msgspec.field(default_factory=list)

    def task(self, task_id: str) -> SerializedTask:
        """The task by id, from an index built on first use: the scheduler asks once per
        ready instance, and a DAG may have thousands of tasks."""
        try:
            index: dict[str, SerializedTask] = self.__dict__["_by_id"]
        except KeyError:
            index = {t.task_id: t for t in self.tasks}
            self.__dict__["_by_id"] = index
        return index[task_id]

    def in_order(self, task_ids: Iterable[str]) -> list[SerializedTask]:
        """These tasks, in topological order (from an index built on first use): a plan
        visits a run's tasks with pending instances, often few of many."""
        try:
            position: dict[str, int] = self.__dict__["_position"]
        except KeyError:
            position = {t.task_id: i for i, t in enumerate(self.tasks)}
            self.__dict__["_position"] = position
        return [self.tasks[i] for i in sorted(position[t] for t in task_ids if t in position)]

    def mapped_tasks(self) -> list[SerializedTask]:
        """The mapped tasks, in topological order (found on first use: a pass asks for
        every run it plans)."""
        try:
            mapped: list[SerializedTask] = self.__dict__["_mapped"]
        except KeyError:
            mapped = [t for t in self.tasks if t.is_mapped]
            self.__dict__["_mapped"] = mapped
        return mapped
