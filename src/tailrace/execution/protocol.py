"""Messages between a worker process and its owner (the executor), msgpack over a pipe.

Workers never open the metadata database: they ask their owner for what they need
(XCom values, connections, variables) and report everything (state, XComs, skips) in one
final message that the owner commits in a single transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec

from tailrace.sdk.timezone import json_default

# Over HTTP (a remote worker and the execution API), a message's last bytes may be this
# many bytes of the try's log, appended before the message is handled.
LOG_BYTES_HEADER = "X-Tailrace-Log-Bytes"
# At most this many tries' messages go in one request to the execution API's /messages.
MAX_POSTS = 8


class Post(msgspec.Struct, frozen=True, array_like=True):
    """One try's message in a request to the execution API that carries several (ADR
    0051): what ``/task-instances/<id>/messages`` takes, with the try's token and the
    log lines that go with it."""

    ti_id: int
    token: str
    message: bytes  # msgpack, as on the pipe
    log: bytes = b""
    log_stint: str | None = None
    log_offset: int | None = None


class PostReply(msgspec.Struct, frozen=True, array_like=True):
    """The answer to one ``Post``: the HTTP status its own request would have had, and
    its msgpack reply (200) or error message (4xx, 5xx)."""

    status: int
    body: bytes = b""


class DagRunPayload(msgspec.Struct, frozen=True, kw_only=True):
    dag_id: str
    run_id: str
    run_type: str
    logical_date: datetime | None
    data_interval_start: datetime | None
    data_interval_end: datetime | None
    start_date: datetime | None
    conf: dict[str, Any]


class EventEnvelope(msgspec.Struct, frozen=True, array_like=True):
    """One trigger event as delivered to a consumer, in sequence order."""

    trigger_run_id: str
    sequence_index: int
    payload: str  # JSON text
    is_last: bool


class RunTask(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    ti_id: int
    # The operator's queue (Celery routes by it; the local executor has one pool).
    queue: str = "default"
    dag_run_id: int
    dag_id: str
    task_id: str
    map_index: int
    try_number: int
    max_tries: int
    fileloc: str
    dag_run: DagRunPayload
    log_path: str
    execution_timeout: float | None = None
    # Mapped upstream tasks, so a pull of their output collects every instance.
    mapped_task_ids: list[str] = msgspec.field(default_factory=list)
    # An .iterate() task's mapped sources: their instance counts (concat needs them).
    mapped_lengths: dict[str, int] = msgspec.field(default_factory=dict)
    # Resuming after deferral: the method to call, its kwargs, and the trigger events to
    # hand it (one for a classic resume method, a batch for handle_trigger_events).
    next_method: str | None = None
    next_kwargs: dict[str, Any] | None = None
    events: list[EventEnvelope] = msgspec.field(default_factory=list)
    # W3C trace context (tracing on): the span this stint of the try continues — the try
    # on its first run, the batch of trigger events it resumes with, a Celery hop.
    traceparent: str | None = None


class CallbackTry(msgspec.Struct, frozen=True, kw_only=True):
    """The try a task callback is for: it ended without a worker to call it (ADR 0033)."""

    ti_id: int
    dag_run_id: int
    task_id: str
    map_index: int
    try_number: int
    max_tries: int
    # Why the try ended (context["exception"] for a failure or retry callback).
    error: str | None = None


class DeadlineCall(msgspec.Struct, frozen=True, kw_only=True):
    """A missed deadline's SyncCallback (ADR 0037): the callable by import path, its
    kwargs (templates not yet rendered) and the context it is called with."""

    path: str
    kwargs: dict[str, Any]
    context: dict[str, Any]


class RunDagCallback(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """Run a DAG's ``on_success_callback`` or ``on_failure_callback`` for a finished run,
    or (``task`` set) a task's ``on_<kind>_callback`` for a try that ended without a
    worker: user code, so a worker's job (the scheduler runs none)."""

    callback_id: int
    dag_id: str
    fileloc: str
    # Which callback: "success" or "failure" (a task's also "retry" or "skipped");
    # ``reason`` is a DAG callback context's.
    kind: str
    reason: str
    dag_run: DagRunPayload
    log_path: str
    queue: str = "default"
    task: CallbackTry | None = None
    # A missed deadline's callback instead (``kind`` "deadline").
    deadline: DeadlineCall | None = None


class DagCallbackFinished(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    callback_id: int
    ok: bool
    error: str | None = None


class Shutdown(msgspec.Struct, frozen=True, tag=True):
    pass


class XComRow(msgspec.Struct, frozen=True, array_like=True):
    task_id: str
    map_index: int
    value: str  # JSON text


class StreamRef(msgspec.Struct, frozen=True, array_like=True):
    """A task instance's output stream, read page by page with ``GetStreamItems``."""

    task_id: str
    map_index: int
    stream_id: int
    length: int


class XComReply(msgspec.Struct, frozen=True, tag=True):
    rows: list[XComRow]
    # Output streams of the requested tasks (for the return value): read lazily.
    streams: list[StreamRef] = msgspec.field(default_factory=list)


class GetStreamItems(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    stream_id: int
    start: int
    limit: int


class StreamItemsReply(msgspec.Struct, frozen=True, tag=True):
    values: list[str]  # JSON text, in index order


class StreamItems(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """Items a running task yielded, for its output stream (sent while it runs)."""

    ti_id: int
    try_number: int
    items: list[str]  # JSON text
    # The first item's index in this try's stream: a report sent twice (a retried HTTP
    # request whose answer was lost) is stored once.
    first_index: int | None = None


class TaskStarted(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    ti_id: int
    try_number: int
    pid: int
    hostname: str
    start_date: datetime
    # The Celery worker's node name (remote tries): its loss is this try's loss.
    worker: str | None = None


class GetXCom(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    dag_run_id: int
    task_ids: list[str]
    key: str
    map_indexes: list[int] | None = None


class XComValue(msgspec.Struct, frozen=True, array_like=True):
    key: str
    value: str  # JSON text
    # For list values: their length, so the scheduler expands without decoding.
    length: int | None = None


class Deferral(msgspec.Struct, frozen=True, kw_only=True):
    """The task handed its waiting to a trigger; it resumes with ``method_name``."""

    classpath: str
    kwargs: dict[str, Any]
    method_name: str
    next_kwargs: dict[str, Any] = msgspec.field(default_factory=dict)
    timeout: float | None = None
    # "classic" (the resume method per event), "batch" (handle_trigger_events).
    consumer: str = "classic"
    # What a passed timeout does: "failed", "failed_no_retry" or "skipped".
    timeout_outcome: str = "failed"
    # W3C trace context (tracing on): the span that deferred; the trigger run is its child.
    traceparent: str | None = None


class AssetEventReport(msgspec.Struct, frozen=True, array_like=True):
    """What a successful try set on an outlet's event: ``extra`` for an asset of its
    outlets (``alias`` None), or an asset added through alias ``alias``."""

    name: str
    uri: str
    group: str
    extra: dict[str, Any]
    alias: str | None = None


class GetAssetEvents(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """A task reads events: of an asset (``name``) or an alias, oldest first from
    ``offset``; or, with ``dag_run_id``, the events that started that run."""

    name: str | None = None
    alias: str | None = None
    offset: int = 0
    limit: int = 0
    dag_run_id: int | None = None


class AssetEventRow(msgspec.Struct, frozen=True, array_like=True):
    id: int
    name: str
    uri: str
    group: str
    extra: dict[str, Any]
    timestamp: datetime
    source_dag_id: str | None
    source_task_id: str | None
    source_run_id: str | None
    source_map_index: int
    source_alias_name: str | None


class AssetEventsReply(msgspec.Struct, frozen=True, tag=True):
    total: int
    events: list[AssetEventRow]


# "handled": trigger events were handled and the task waits for more (stays deferred).
Outcome = Literal["success", "failed", "failed_no_retry", "skipped", "deferred", "handled"]


class TaskFinished(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    ti_id: int
    try_number: int
    outcome: Outcome
    start_date: datetime | None
    end_date: datetime
    error: str | None = None
    # XComs to store, committed in the same transaction as the state.
    xcoms: list[XComValue] = msgspec.field(default_factory=list)
    skip_task_ids: list[str] = msgspec.field(default_factory=list)
    rendered_map_index: str | None = None
    deferral: Deferral | None = None
    # Handling trigger events: items for the task's output stream (JSON texts) and the
    # highest sequence_index handled — committed together with the state.
    stream_items: list[str] = msgspec.field(default_factory=list)
    acked_sequence: int | None = None
    # A try that failed handling trigger events: the first and last sequence_index it was
    # handed (with stream_retry="dead_letter", its last try sends them to the dead letters).
    failed_events: tuple[int, int] | None = None
    # The task yielded its output (sent as StreamItems while it ran): close its stream.
    streamed: bool = False
    # The try's templated fields as rendered ({field: text}, masked and cut); None when
    # rendering did not happen.
    rendered_fields: dict[str, str] | None = None
    # On success: the extras of its outlets' events, and assets added through aliases.
    asset_events: list[AssetEventReport] = msgspec.field(default_factory=list)
    # A worker ran the task's end-of-try callbacks. A report the scheduler makes up for a
    # try no worker finished (a deferral timeout, a lost worker) has not: one is asked to.
    callbacks_run: bool = False


class GetConnection(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """A hook in the task needs a connection no environment variable defines."""

    conn_id: str


class ConnectionReply(msgspec.Struct, frozen=True, tag=True):
    conn_id: str
    uri: str | None  # None: no such connection


class GetVariable(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """``Variable.get`` in the task, for a key no environment variable defines."""

    key: str


class SetVariable(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """``Variable.set`` in the task: stored by the owner before it answers."""

    key: str
    value: str
    description: str | None = None


class DeleteVariable(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    key: str


class VariableReply(msgspec.Struct, frozen=True, tag=True):
    key: str
    value: str | None  # None: no such variable (after a delete: there was none)


# Variable requests that write: the owner answers them on a writing connection.
VariableWrite = SetVariable | DeleteVariable

ToWorker = (
    RunTask
    | RunDagCallback
    | XComReply
    | StreamItemsReply
    | ConnectionReply
    | AssetEventsReply
    | VariableReply
    | Shutdown
)
FromWorker = (
    TaskStarted
    | StreamItems
    | GetXCom
    | GetStreamItems
    | GetConnection
    | GetAssetEvents
    | GetVariable
    | SetVariable
    | DeleteVariable
    | TaskFinished
    | DagCallbackFinished
)
# What an executor is handed: a task's try, or a finished run's DAG callback.
Workload = RunTask | RunDagCallback
# What a worker may ask its owner while a task runs, and the answers.
WorkerRequest = (
    GetXCom
    | GetStreamItems
    | GetConnection
    | GetAssetEvents
    | GetVariable
    | SetVariable
    | DeleteVariable
)
WORKER_REQUESTS = (
    GetXCom,
    GetStreamItems,
    GetConnection,
    GetAssetEvents,
    GetVariable,
    SetVariable,
    DeleteVariable,
)
WorkerReply = XComReply | StreamItemsReply | ConnectionReply | AssetEventsReply | VariableReply

_encoder = msgspec.msgpack.Encoder(enc_hook=json_default)
_to_worker = msgspec.msgpack.Decoder(ToWorker)
_from_worker = msgspec.msgpack.Decoder(FromWorker)
_posts = msgspec.msgpack.Decoder(list[Post])
_post_replies = msgspec.msgpack.Decoder(list[PostReply])


class _Tag(msgspec.Struct):
    type: str


_tag = msgspec.msgpack.Decoder(_Tag)


def encode(msg: ToWorker | FromWorker) -> bytes:
    return _encoder.encode(msg)


def decode_to_worker(data: bytes) -> ToWorker:
    return _to_worker.decode(data)


def decode_from_worker(data: bytes) -> FromWorker:
    return _from_worker.decode(data)


def message_type(data: bytes) -> str:
    """The name of the message ``data`` encodes (its tag), without decoding the rest."""
    return _tag.decode(data).type


def encode_posts(posts: list[Post] | list[PostReply]) -> bytes:
    return _encoder.encode(posts)


def decode_posts(data: bytes) -> list[Post]:
    return _posts.decode(data)


def decode_post_replies(data: bytes) -> list[PostReply]:
    return _post_replies.decode(data)
