"""Request and response bodies of the REST API; FastAPI builds the OpenAPI document from them."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

import msgspec
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from tailrace.serialization import loads
from tailrace.store.dead_letters import Letter

T = TypeVar("T")

# Identifiers as the SDK allows them (a task in a group has a dot), and run ids without
# control characters or path separators (a run id names its log directory): both are
# compared with, and stored in, String(250) columns.
ID_PATTERN = r"^[A-Za-z0-9_.\-]+$"
RUN_ID_PATTERN = r"^[^\x00-\x1f\x7f/\\]+$"
TEXT_PATTERN = r"^[^\x00]*$"
ID_MAX = 250
# Map indexes and try numbers are 32-bit integers in the database.
INT32_MAX = 2**31 - 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorInfo(_Model):
    code: str = Field(examples=["not_found"])
    message: str
    detail: Any = None


class ErrorBody(_Model):
    error: ErrorInfo


class Page(_Model, Generic[T]):
    items: list[T]
    next_cursor: str | None = Field(
        description="Pass as `cursor` to get the next page; null on the last page."
    )


# --- auth --------------------------------------------------------------------------------


class TokenRequest(_Model):
    username: str = Field(min_length=1, max_length=ID_MAX, pattern=TEXT_PATTERN)
    password: str = Field(min_length=1, max_length=1024, pattern=TEXT_PATTERN)


class TokenResponse(_Model):
    access_token: str
    token_type: Literal["bearer"] = "bearer"
    expires_at: datetime


class Me(_Model):
    username: str
    role: Literal["admin", "viewer"]


class Session(Me):
    expires_at: datetime


# --- DAGs ---------------------------------------------------------------------------------


class Dag(_Model):
    dag_id: str
    schedule: str
    paused: bool
    next_run: datetime | None
    latest_run_state: str | None
    fileloc: str
    description: str | None
    tags: list[str]
    max_active_runs: int
    last_parsed_at: datetime | None


class DagPatch(_Model):
    is_paused: bool


class DagImportError(_Model):
    id: int
    filename: str
    line: int | None
    dag_id: str | None
    task_id: str | None
    message: str
    stacktrace: str
    timestamp: datetime | None


# --- DAG runs -----------------------------------------------------------------------------


class DagRun(_Model):
    dag_id: str
    run_id: str
    state: str
    run_type: str
    logical_date: datetime | None
    queued_at: datetime | None
    start_date: datetime | None
    end_date: datetime | None
    conf: dict[str, Any]
    replay_of: str | None = Field(
        default=None, description="A replay run: the run whose streams it reads."
    )
    backfill_id: int | None = Field(
        default=None, description="A backfill run: the backfill that created it."
    )


class Backfill(_Model):
    """Airflow 3's BackfillResponse."""

    id: int
    dag_id: str
    from_date: datetime
    to_date: datetime
    dag_run_conf: dict[str, Any]
    is_paused: bool
    reprocess_behavior: Literal["none", "failed", "completed"]
    max_active_runs: int
    created_at: datetime
    completed_at: datetime | None = Field(
        description="When it was cancelled, or its last run ended; null while it has runs "
        "to start or finish."
    )
    updated_at: datetime


class BackfillPostBody(_Model):
    """Airflow 3's BackfillPostBody (``run_on_latest_version`` aside: a reprocessed run
    runs the DAG file as it is now, as every cleared run does)."""

    dag_id: str = Field(max_length=ID_MAX, pattern=ID_PATTERN)
    from_date: datetime
    to_date: datetime
    run_backwards: bool = False
    dag_run_conf: dict[str, Any] = Field(default_factory=dict)
    reprocess_behavior: Literal["none", "failed", "completed"] = "none"
    max_active_runs: int = Field(default=10, ge=1, le=INT32_MAX)


class BackfillCollection(_Model):
    backfills: list[Backfill]
    total_entries: int


class DryRunBackfill(_Model):
    logical_date: datetime


class DryRunBackfillCollection(_Model):
    backfills: list[DryRunBackfill]
    total_entries: int


class HITLDetail(_Model):
    """Airflow 3.1's HITLDetail: a task's human-in-the-loop request and its response."""

    dag_id: str
    dag_run_id: str
    task_id: str
    map_index: int
    task_instance_state: str | None
    subject: str
    body: str | None
    options: list[str]
    defaults: list[str] | None
    multiple: bool
    params: dict[str, Any]
    created_at: datetime
    response_received: bool
    responded_at: datetime | None
    responded_by: str | None = Field(
        description="Who responded; null with a response: the timeout's defaults."
    )
    chosen_options: list[str] | None
    params_input: dict[str, Any]


class HITLDetailCollection(_Model):
    hitl_details: list[HITLDetail]
    total_entries: int


class UpdateHITLDetailPayload(_Model):
    chosen_options: list[str] = Field(min_length=1)
    params_input: dict[str, Any] = Field(default_factory=dict)


class HITLDetailResponse(_Model):
    responded_by: str
    responded_at: datetime
    chosen_options: list[str]
    params_input: dict[str, Any]


class RunDeadline(_Model):
    """One of the run's deadline alerts: when the run must have finished by, and, once
    missed, how its callback went."""

    name: str | None
    deadline_time: datetime
    missed: bool
    missed_at: datetime | None
    callback: Literal["sync", "async"] | None = Field(
        description="Missed: who calls back (a worker, or the triggerer)."
    )
    callback_state: Literal["pending", "queued", "success", "failed"] | None
    callback_error: str | None


class DagRunDetail(DagRun):
    task_instance_states: dict[str, int] = Field(
        description="How many task instances are in each state ('none': not yet scheduled)."
    )
    deadlines: list[RunDeadline] = Field(
        default_factory=list,
        description="Its DAG's deadline alerts: pending, or missed with their callback's state.",
    )


class TriggerDagRun(_Model):
    conf: dict[str, Any] = Field(default_factory=dict)
    run_id: str | None = Field(default=None, max_length=ID_MAX, pattern=RUN_ID_PATTERN)


class ReplayRequest(_Model):
    task_id: str = Field(
        max_length=ID_MAX,
        pattern=ID_PATTERN,
        description="The consumer to run again, with every task downstream of it.",
    )
    run_id: str | None = Field(default=None, max_length=ID_MAX, pattern=RUN_ID_PATTERN)


class ClearRequest(_Model):
    task_ids: (
        list[Annotated[str, StringConstraints(pattern=ID_PATTERN, max_length=ID_MAX)]] | None
    ) = Field(default=None, description="Only these tasks; all of the run's when null.")
    only_failed: bool = Field(
        default=False,
        description="Only instances that failed or whose upstream failed (Airflow's name).",
    )


class ClearResult(_Model):
    cleared: int


# --- task instances -----------------------------------------------------------------------


class TaskInstance(_Model):
    id: int
    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    rendered_map_index: str | None
    state: str | None
    try_number: int
    max_tries: int
    operator: str
    queue: str
    queued_at: datetime | None
    start_date: datetime | None
    end_date: datetime | None
    duration: float | None
    hostname: str | None
    error: str | None
    next_retry_at: datetime | None
    trigger_id: int | None


class TaskTry(_Model):
    try_number: int
    state: str | None
    start_date: datetime | None
    end_date: datetime | None
    duration: float | None
    hostname: str | None
    error: str | None


class TaskInstanceDetail(TaskInstance):
    tries: list[TaskTry] = Field(description="Finished tries, then the current one.")


class MarkRequest(_Model):
    state: Literal["success", "failed", "skipped"]


class MarkResult(_Model):
    marked: int


# --- triggers and streams -----------------------------------------------------------------


class Trigger(_Model):
    id: int
    trigger: str
    classpath: str
    dag_id: str | None
    run_id: str | None
    task_id: str | None
    map_index: int | None
    task_state: str | None
    triggerer: str | None = Field(description="host:pid of the triggerer holding the lease.")
    lease_left_seconds: float | None
    age_seconds: float
    events: int
    completed: bool


class Stream(_Model):
    task_instance_id: int
    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    task_state: str | None
    trigger_id: int
    consumer: str
    produced: int
    acknowledged: int
    pending: int
    items: int
    closed: bool
    trigger_done: bool
    events_per_second: float | None
    paused_by_backpressure: bool
    dead_letters: int = Field(
        description='Events of batches that failed every try (stream_retry="dead_letter").'
    )


class StreamItem(_Model):
    index: int
    value: Any


class DeadLetter(_Model):
    """A trigger event whose batch failed every try of a task with
    ``stream_retry="dead_letter"``: acknowledged (the stream went on), kept with the error."""

    id: int
    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    try_number: int
    sequence_index: int
    # The message's id at its broker, where the trigger gave one.
    dedup_key: str | None
    payload: Any
    reason: str
    created_at: datetime

    @classmethod
    def of(cls, letter: Letter) -> DeadLetter:
        return cls(**{**msgspec.structs.asdict(letter), "payload": loads(letter.payload)})


# --- connections --------------------------------------------------------------------------


class Connection(_Model):
    conn_id: str
    uri: str = Field(description="Passwords and secret-like query values masked.")
    description: str | None


class ConnectionCreate(_Model):
    conn_id: str = Field(min_length=1, max_length=ID_MAX, pattern=ID_PATTERN)
    uri: str = Field(min_length=1, max_length=10_000, pattern=TEXT_PATTERN)
    description: str | None = Field(default=None, max_length=10_000, pattern=TEXT_PATTERN)


class Pool(_Model):
    name: str
    slots: int
    description: str | None
    include_deferred: bool = Field(description="Deferred task instances take slots too.")
    running_slots: int
    queued_slots: int
    deferred_slots: int
    occupied_slots: int
    open_slots: int


class PoolSet(_Model):
    slots: int = Field(ge=0, le=2**31 - 1)
    description: str | None = Field(default=None, max_length=10_000, pattern=TEXT_PATTERN)
    include_deferred: bool = False


# --- variables ----------------------------------------------------------------------------


class Variable(_Model):
    key: str
    value: str = Field(
        description="'***' when the key looks like a secret's (password, token, api_key ...); "
        "a JSON object's secret-looking entries masked."
    )
    description: str | None


class VariableCreate(_Model):
    key: str = Field(min_length=1, max_length=ID_MAX, pattern=ID_PATTERN)
    value: str = Field(max_length=1_000_000, pattern=TEXT_PATTERN)
    description: str | None = Field(default=None, max_length=10_000, pattern=TEXT_PATTERN)


class VariableUpdate(_Model):
    value: str = Field(max_length=1_000_000, pattern=TEXT_PATTERN)
    description: str | None = Field(default=None, max_length=10_000, pattern=TEXT_PATTERN)


# --- web UI -------------------------------------------------------------------------------
# Shapes only the web UI needs: summaries computed with GROUP BY, so a run with a million
# mapped instances costs a handful of rows.


class UiTask(_Model):
    task_id: str
    operator: str = Field(description="The operator's class, as stored with the task.")
    operator_name: str = Field(
        description="The name the author used: `@task.branch` for the class it creates."
    )
    upstream: list[str]
    downstream: list[str]
    task_group: str | None
    mapped: Literal["expand", "iterate"] | None = Field(
        description="How the task is mapped: `.expand()`, `.iterate()`, or not at all."
    )
    iterate_sources: list[str] = Field(description="Tasks whose items an `.iterate()` maps.")
    starts_in_triggerer: bool
    layer: int = Field(description="Column in a left-to-right layered layout (0: roots).")
    row: int = Field(description="Row in the layout: a task group's tasks share a band of rows.")


class UiEdge(_Model):
    source_id: str
    target_id: str
    label: str | None = Field(description='Its `Label` (`a >> Label("on success") >> b`).')


class UiGroup(_Model):
    group_id: str
    label: str = Field(description="The id without its parent group's prefix.")
    parent: str | None
    depth: int = Field(description="0 for a top-level group.")
    first_layer: int
    last_layer: int
    first_row: int
    last_row: int


class UiParam(_Model):
    default: Any = None
    has_default: bool
    description: str | None


class DagStructure(_Model):
    dag_id: str
    description: str | None
    schedule: str
    tasks: list[UiTask] = Field(description="In topological order.")
    edges: list[UiEdge] = Field(description="Every dependency, upstream to downstream.")
    groups: list[UiGroup] = Field(
        description="Task groups with the box of layers and rows their tasks fill; a parent "
        "before its children."
    )
    params: dict[str, UiParam]


class TaskSummary(_Model):
    task_id: str
    state: str | None = Field(
        description="The instance's state; for a mapped task, the most urgent of its states."
    )
    counts: dict[str, int] = Field(description="Instances per state ('none': not yet scheduled).")
    total: int


class GridRun(DagRun):
    tasks: dict[str, TaskSummary]
    trace_id: str = Field(description="The run's OpenTelemetry trace id (32 hex digits).")


class Grid(_Model):
    task_ids: list[str] = Field(description="Rows of the grid, in topological order.")
    items: list[GridRun] = Field(description="Runs, newest first.")
    next_cursor: str | None


class DagOverview(Dag):
    recent_runs: list[DagRun] = Field(description="The latest runs, newest first.")


class StreamView(Stream):
    latest_items: list[StreamItem]
    latest_dead_letters: list[DeadLetter]


class RunTask(TaskSummary):
    try_number: int = Field(description="The latest try among the task's instances (0: none).")
    start_date: datetime | None = Field(description="When its first instance started.")
    end_date: datetime | None = Field(description="When its last instance ended, once all have.")
    duration: float | None = Field(description="Seconds from first start to last end.")
    error: str | None = Field(
        description="The last line of the error of its first failed instance, if any."
    )
    error_map_index: int | None = Field(description="That instance's map index.")


class RunView(_Model):
    run: DagRunDetail
    tasks: list[RunTask] = Field(description="Per task, in topological order.")
    streams: list[StreamView]


class RenderedField(_Model):
    field: str
    value: str = Field(description="The rendered value as text; cut after 4,096 characters.")


class RenderedFields(_Model):
    try_number: int
    rendered: bool = Field(
        description="False: this try has not rendered its templates (not run yet, or it "
        "failed before rendering)."
    )
    fields: list[RenderedField] = Field(description="In the task's template_fields order.")


class TimelineSegment(_Model):
    kind: str = Field(description="queued, running or deferred.", examples=["running"])
    start: datetime
    end: datetime = Field(description="Its end, or now for one still going (`open`).")
    open: bool


class TimelineTry(_Model):
    try_number: int
    state: str | None = Field(description="Its state after its latest change.")
    segments: list[TimelineSegment] = Field(description="In time order.")


class TimelineEventBatch(_Model):
    try_number: int
    trigger_run_id: str
    first: int = Field(description="Sequence index of its first event.")
    last: int = Field(description="Sequence index of its last event.")
    count: int
    arrived_at: datetime | None = Field(description="When its first event was written.")
    handed_at: datetime = Field(description="When it was handed to the task.")


class TimelineTriggerRun(_Model):
    trigger_run_id: str
    start: datetime | None = Field(description="When its trigger was created.")
    end: datetime | None = Field(description="When its latest event handed on arrived.")


class TimelineTask(_Model):
    task_id: str
    map_index: int
    tries: list[TimelineTry]
    event_batches: list[TimelineEventBatch]
    trigger_runs: list[TimelineTriggerRun]


class RunTimeline(_Model):
    dag_id: str
    run_id: str
    trace_id: str = Field(
        description="The run's OpenTelemetry trace id (32 hex digits), exported when tracing "
        "is on (docs/concepts/tracing.md)."
    )
    tracing: bool = Field(description="Whether this api-server exports traces.")
    state: str
    start_date: datetime | None
    end_date: datetime | None
    now: datetime = Field(description="When this was read: the end of segments still open.")
    tasks: list[TimelineTask] = Field(
        description="Task instances that were queued or deferred, by when they began."
    )


class XComEntry(_Model):
    key: str
    map_index: int
    value: Any = Field(description="The value; cut JSON text when `truncated`.")
    truncated: bool
    size: int = Field(description="Characters of the stored JSON.")
    created_at: datetime


# --- assets ------------------------------------------------------------------------------

ASSET_MAX = 1500


class Asset(_Model):
    id: int
    name: str
    uri: str
    group: str
    extra: dict[str, Any]
    events: int = Field(description="Events recorded for it.")
    last_event_at: datetime | None
    producers: list[str] = Field(description="`dag.task` of each task with it in outlets.")
    consumers: list[str] = Field(description="DAGs scheduled on it.")


class AssetEvent(_Model):
    id: int
    asset: str = Field(description="The asset's name.")
    uri: str
    extra: dict[str, Any]
    timestamp: datetime
    source_dag_id: str | None
    source_task_id: str | None
    source_run_id: str | None
    source_map_index: int
    source_alias_name: str | None


class CreateAssetEvent(_Model):
    asset: str = Field(
        min_length=1, max_length=ASSET_MAX, pattern=TEXT_PATTERN, description="Name or URI."
    )
    extra: dict[str, Any] = Field(default_factory=dict)
    dedup_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=512,
        pattern=TEXT_PATTERN,
        description="An idempotency key: an event whose key was recorded before is not "
        "recorded again (the answer is 200 with the existing event).",
    )


class AssetGraphNode(_Model):
    id: str
    kind: Literal["dag", "asset"]
    label: str


class AssetGraphEdge(_Model):
    source: str
    target: str


class AssetGraph(_Model):
    nodes: list[AssetGraphNode]
    edges: list[AssetGraphEdge]


class AssetWaiting(_Model):
    dag_id: str
    description: str = Field(description="The schedule's condition, by asset name.")
    condition: dict[str, Any] = Field(
        description="The condition as a tree; each part says whether it is `met`."
    )
    queued_events: int = Field(description="Events queued for the DAG's next run.")
    missing: list[str] = Field(description="Assets whose events the next run waits for.")
    last_asset_triggered_run_at: datetime | None
