"""The task runner inside a pre-started worker process.

A worker handles one task at a time: it imports the DAG file (cached per file version),
builds the context, runs the operator and reports one ``TaskFinished`` to its owner.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
from collections.abc import Callable, Collection, Iterable, Iterator
from datetime import datetime
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from tailrace import metrics, tracing
from tailrace.alarm import deadline
from tailrace.clock import utcnow
from tailrace.dagfiles import DagFileCache, prepare_import_path
from tailrace.execution._logs import capture_task_logs, drain_task_logs, finish_log_later
from tailrace.execution.protocol import (
    AssetEventReport,
    AssetEventRow,
    AssetEventsReply,
    CallbackTry,
    ConnectionReply,
    DagCallbackFinished,
    DagRunPayload,
    DeadlineCall,
    Deferral,
    DeleteVariable,
    GetAssetEvents,
    GetConnection,
    GetStreamItems,
    GetVariable,
    GetXCom,
    Outcome,
    RunDagCallback,
    RunTask,
    SetVariable,
    Shutdown,
    StreamItems,
    StreamItemsReply,
    TaskFinished,
    TaskStarted,
    VariableReply,
    XComReply,
    XComValue,
    decode_to_worker,
    encode,
)
from tailrace.metrics import logs
from tailrace.sdk.connections import redact, set_connection_source
from tailrace.sdk.variables import set_variable_source
from tailrace.serialization import dumps, loads
from tailrace.state import state_after_try
from tailrace.tracebacks import user_traceback

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from tailrace.sdk import DAG, AssetEvent
    from tailrace.sdk.execution import Context

HOSTNAME = socket.gethostname()
HANDLE_TRIGGER_EVENTS = "handle_trigger_events"  # tailrace.sdk.triggers, without importing it
# A rendered field's text is cut after this many characters, as Airflow's
# max_templated_field_length (its default).
RENDERED_FIELD_MAX_CHARS = 4096
# Outcomes whose XComs and stream items are kept (committed with the state).
_KEEPS_OUTPUT = ("success", "deferred", "handled")
# Outcomes after which nothing appends to the try's log (a deferred try's trigger and
# its next stint do): its file may be made after the worker takes its next try.
_TRY_OVER = frozenset({"success", "failed", "failed_no_retry", "skipped"})


class XComTooLargeError(ValueError):
    pass


class Channel(Protocol):
    """How a worker talks to its owner: a pipe, or the execution API over HTTP."""

    def send_bytes(self, buf: bytes) -> None: ...

    def recv_bytes(self) -> bytes: ...


class RuntimeTI:
    """The ``ti`` a task sees. Subclasses say where XCom values come from."""

    def __init__(
        self, job: RunTask, max_xcom_bytes: int, mapped_task_ids: Collection[str] = ()
    ) -> None:
        self.dag_id = job.dag_id
        self.run_id = job.dag_run.run_id
        self.task_id = job.task_id
        self.map_index = job.map_index
        self.try_number = job.try_number
        self.max_tries = job.max_tries
        self.hostname = HOSTNAME
        self._job = job
        self._max_xcom_bytes = max_xcom_bytes
        self._mapped = set(mapped_task_ids) | set(job.mapped_task_ids)
        self.pushed: dict[str, XComValue] = {}
        self.skipped: set[str] = set()
        self.stream_items: list[str] = []
        self.streamed = False  # the task yielded its output

    def _fetch(self, task_ids: list[str], key: str, map_indexes: list[int] | None) -> XComReply:
        raise NotImplementedError

    def _fetch_stream(self, stream_id: int, start: int, limit: int) -> list[str]:
        raise NotImplementedError

    def xcom_push(self, key: str, value: Any) -> None:
        try:
            text = dumps(value)
        except TypeError as exc:
            raise TypeError(
                f"task {self.task_id!r} of DAG {self.dag_id!r} pushed XCom {key!r} that "
                f"cannot be stored: {exc}. Return or push JSON-serializable values "
                "(dict, list, str, int, float, bool, None, datetime)."
            ) from None
        if len(text) > self._max_xcom_bytes:
            raise XComTooLargeError(
                f"task {self.task_id!r} of DAG {self.dag_id!r} pushed XCom {key!r} of "
                f"{len(text):,} bytes, over the limit of {self._max_xcom_bytes:,} bytes. "
                "Store large data elsewhere and pass a reference, or raise "
                "TAILRACE_MAX_PAYLOAD_BYTES."
            )
        length = len(value) if isinstance(value, list | tuple | dict) else None
        self.pushed[key] = XComValue(key, text, length)

    def xcom_pull(
        self,
        task_ids: str | Iterable[str] | None = None,
        key: str = "return_value",
        map_indexes: int | Iterable[int] | None = None,
        default: Any = None,
        dag_id: str | None = None,
        run_id: str | None = None,
    ) -> Any:
        if dag_id not in (None, self.dag_id) or run_id not in (None, self.run_id):
            raise ValueError(
                f"task {self.task_id!r}: xcom_pull from another DAG or run is not supported"
            )
        single_task = task_ids is None or isinstance(task_ids, str)
        if task_ids is None or isinstance(task_ids, str):
            ids = [task_ids or self.task_id]
        else:
            ids = list(task_ids)
        indexes = (
            None
            if map_indexes is None
            else ([map_indexes] if isinstance(map_indexes, int) else list(map_indexes))
        )
        found: dict[str, dict[int, Any]] = {}
        reply = self._fetch(ids, key, indexes)
        for row in reply.rows:
            found.setdefault(row.task_id, {})[row.map_index] = loads(row.value)
        # A task whose output is a stream (and no XCom value): read lazily, page by page.
        for ref in reply.streams:
            found.setdefault(ref.task_id, {}).setdefault(
                ref.map_index, StreamReader(ref.stream_id, ref.length, self._fetch_stream)
            )

        def value_of(task_id: str) -> Any:
            values = found.get(task_id, {})
            if indexes is None and task_id in self._mapped:
                return [values[i] for i in sorted(values) if i >= 0]
            if indexes is None:
                return values.get(-1, default)
            picked = [values.get(i, default) for i in indexes]
            return picked[0] if isinstance(map_indexes, int) else picked

        if single_task:
            return value_of(ids[0])
        return [value_of(t) for t in ids]

    def stream_output(self, items: Iterable[Any]) -> None:
        """The task yields its output: each item goes to its output stream (here, with
        the final report; a worker sends them to its owner as they come)."""
        for item in items:
            self.stream_items.append(self._stream_text(item))

    def _stream_text(self, item: Any) -> str:
        try:
            text = dumps(item)
        except TypeError as exc:
            raise TypeError(
                f"task {self.task_id!r} of DAG {self.dag_id!r} yielded an item that cannot be "
                f"stored in its output stream: {exc}. Yield JSON-serializable values."
            ) from None
        if len(text) > self._max_xcom_bytes:
            raise XComTooLargeError(
                f"task {self.task_id!r} of DAG {self.dag_id!r} yielded an item of "
                f"{len(text):,} bytes, over the limit of {self._max_xcom_bytes:,} bytes. "
                "Yield a reference (a path, an id) instead, or raise TAILRACE_MAX_PAYLOAD_BYTES."
            )
        return text

    def mapped_length(self, task_id: str) -> int:
        """How many instances mapped task ``task_id`` has (skipped ones included)."""
        try:
            return self._job.mapped_lengths[task_id]
        except KeyError:
            raise LookupError(
                f"task {self.task_id!r}: the instance count of {task_id!r} was not sent "
                "with this task (only an .iterate() task's mapped sources are)"
            ) from None

    def skip_downstream_tasks(self, task_ids: Collection[str]) -> None:
        self.skipped.update(task_ids)

    def _fetch_events(self, request: GetAssetEvents) -> AssetEventsReply:
        return AssetEventsReply(0, [])  # no metadata database here: no events

    def fetch_asset_events(
        self, name: str | None, alias: str | None, offset: int, limit: int
    ) -> tuple[int, list[AssetEvent]]:
        """An inlet's events, oldest first (the SDK's ``inlet_events`` reads through this)."""
        reply = self._fetch_events(
            GetAssetEvents(name=name, alias=alias, offset=offset, limit=limit)
        )
        return reply.total, [_asset_event(r) for r in reply.events]

    def fetch_triggering_asset_events(self) -> list[AssetEvent]:
        reply = self._fetch_events(GetAssetEvents(dag_run_id=self._job.dag_run_id))
        return [_asset_event(r) for r in reply.events]


def _asset_event(row: AssetEventRow) -> AssetEvent:
    from tailrace.sdk import Asset, AssetEvent

    return AssetEvent(
        id=row.id,
        asset=Asset(name=row.name, uri=row.uri, group=row.group),
        extra=row.extra,
        timestamp=row.timestamp,
        source_dag_id=row.source_dag_id,
        source_task_id=row.source_task_id,
        source_run_id=row.source_run_id,
        source_map_index=row.source_map_index,
        source_alias_name=row.source_alias_name,
    )


def outlet_event_reports(context: Context) -> list[AssetEventReport]:
    """What the task set on its outlets' events (``context["outlet_events"]``), for the
    owner to record with its success; extras are made JSON as they will be stored."""
    from tailrace.sdk import Asset

    reports = []
    for key, accessor in context["outlet_events"].items():
        if isinstance(key, Asset):
            reports.append(
                AssetEventReport(key.name, key.uri, key.group, _json_extra(key, accessor.extra))
            )
        for asset, extra in accessor.added:
            reports.append(
                AssetEventReport(
                    asset.name, asset.uri, asset.group, _json_extra(asset, extra), key.name
                )
            )
    return reports


def _json_extra(asset: Any, extra: dict[str, Any]) -> dict[str, Any]:
    try:
        value = loads(dumps(extra))
    except TypeError as exc:
        raise TypeError(f"the extra of {asset!r}'s event cannot be stored: {exc}") from None
    if not isinstance(value, dict):
        raise TypeError(f"the extra of {asset!r}'s event must be a dict, not {type(extra)}")
    return value


class WorkerTaskInstance(RuntimeTI):
    """XCom reads go through the owner over the worker's pipe, never to the database."""

    def __init__(self, job: RunTask, conn: Channel, max_xcom_bytes: int) -> None:
        super().__init__(job, max_xcom_bytes)
        self._conn = conn
        self._items_sent = 0

    def _fetch(self, task_ids: list[str], key: str, map_indexes: list[int] | None) -> XComReply:
        request = GetXCom(
            dag_run_id=self._job.dag_run_id, task_ids=task_ids, key=key, map_indexes=map_indexes
        )
        self._conn.send_bytes(encode(request))
        reply = decode_to_worker(self._conn.recv_bytes())
        if not isinstance(reply, XComReply):
            raise RuntimeError(f"expected an XCom reply from the owner, got {reply!r}")
        return reply

    def stream_output(self, items: Iterable[Any]) -> None:
        # Each item goes to the owner as soon as it exists: the generator may block next
        # (waiting for a page). The scheduler writes the items of a pass together.
        job = self._job
        self.streamed = True
        for item in items:
            message = StreamItems(
                ti_id=job.ti_id,
                try_number=job.try_number,
                items=[self._stream_text(item)],
                first_index=self._items_sent,
            )
            self._conn.send_bytes(encode(message))
            self._items_sent += 1

    def _fetch_stream(self, stream_id: int, start: int, limit: int) -> list[str]:
        self._conn.send_bytes(encode(GetStreamItems(stream_id=stream_id, start=start, limit=limit)))
        reply = decode_to_worker(self._conn.recv_bytes())
        if not isinstance(reply, StreamItemsReply):
            raise RuntimeError(f"expected stream items from the owner, got {reply!r}")
        return reply.values

    def _fetch_events(self, request: GetAssetEvents) -> AssetEventsReply:
        self._conn.send_bytes(encode(request))
        reply = decode_to_worker(self._conn.recv_bytes())
        if not isinstance(reply, AssetEventsReply):
            raise RuntimeError(f"expected asset events from the owner, got {reply!r}")
        return reply

    def fetch_connection(self, conn_id: str) -> str | None:
        """A connection's URI from the owner's database (the SDK's connection source)."""
        self._conn.send_bytes(encode(GetConnection(conn_id=conn_id)))
        reply = decode_to_worker(self._conn.recv_bytes())
        if not isinstance(reply, ConnectionReply):
            raise RuntimeError(f"expected a connection from the owner, got {reply!r}")
        return reply.uri


class OwnerVariables:
    """The SDK's variable source in a worker: each get, set and delete asks the owner
    (its pipe, or the execution API for a remote worker), which reads or writes the
    database."""

    def __init__(self, conn: Channel) -> None:
        self._conn = conn

    def get(self, key: str) -> str | None:
        return self._ask_variable(GetVariable(key=key))

    def set(self, key: str, value: str, description: str | None) -> None:
        self._ask_variable(SetVariable(key=key, value=value, description=description))

    def delete(self, key: str) -> bool:
        return self._ask_variable(DeleteVariable(key=key)) is not None

    def _ask_variable(self, request: GetVariable | SetVariable | DeleteVariable) -> str | None:
        self._conn.send_bytes(encode(request))
        reply = decode_to_worker(self._conn.recv_bytes())
        if not isinstance(reply, VariableReply):
            raise RuntimeError(f"expected a variable from the owner, got {reply!r}")
        return reply.value


class StreamReader:
    """An upstream task's output stream, read from its owner a page at a time.

    Iterating holds one page in memory however long the stream is; ``len()`` is known
    because the stream closed before its downstream task started.
    """

    PAGE = 1000

    def __init__(
        self, stream_id: int, length: int, fetch: Callable[[int, int, int], list[str]]
    ) -> None:
        self._stream_id = stream_id
        self._length = length
        self._fetch = fetch

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[Any]:
        start = 0
        while start < self._length:
            page = self._fetch(self._stream_id, start, self.PAGE)
            if not page:
                return
            for value in page:
                yield loads(value)
            start += len(page)

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):  # one read for a range (no steps)
            start, stop, step = index.indices(self._length)
            if step != 1:
                raise ValueError("stream slices take no step")
            if stop <= start:
                return []
            return [loads(v) for v in self._fetch(self._stream_id, start, stop - start)]
        if not -self._length <= index < self._length:
            raise IndexError(f"stream index {index} out of range (length {self._length})")
        (value,) = self._fetch(self._stream_id, index % self._length, 1)
        return loads(value)

    def __repr__(self) -> str:
        return f"<stream of {self._length} items>"


def load_dag(cache: DagFileCache, fileloc: str, dag_id: str) -> DAG:
    loaded = cache.get(fileloc)
    dag = loaded.dags.get(dag_id)
    if dag is None:
        problems = "; ".join(e.message for e in loaded.errors) or "no such DAG in the file"
        raise LookupError(f"DAG {dag_id!r} could not be loaded from {fileloc}: {problems}")
    return dag


def job_context(job: RunTask, ti: RuntimeTI, dag: DAG) -> Context:
    """The context the task of ``job`` runs with (its callbacks too)."""
    from tailrace.sdk.execution import DagRunInfo, build_context

    task = dag.get_task(job.task_id)
    run = job.dag_run
    dag_run = DagRunInfo(**{**msgspec.structs.asdict(run), **_run_dates(run)})
    # A task's params already include its DAG's, with its own taking precedence.
    params = getattr(task, "params", dag.params).resolve(run.conf, dag_id=dag.dag_id)
    return build_context(dag=dag, task=task, ti=ti, dag_run=dag_run, params=params)


_DATE_FIELDS = ("logical_date", "data_interval_start", "data_interval_end", "start_date")
# The last run's dates as pendulum DateTimes: a worker's next try is mostly of the same
# run, and converting four dates cost a mapped no-op try a tenth of its CPU. Only the
# (immutable) dates are kept, never the run's conf, which a task may change.
_last_dates: tuple[tuple[Any, ...], dict[str, Any]] = ((), {})


def _run_dates(run: DagRunPayload) -> dict[str, Any]:
    global _last_dates
    values = [getattr(run, name) for name in _DATE_FIELDS]
    # With their zones: equal instants in two zones are equal datetimes.
    key = tuple((v, v.tzinfo if v is not None else None) for v in values)
    last_key, last = _last_dates  # one read: another thread may replace it meanwhile
    if key == last_key:
        return last
    from tailrace.sdk.timezone import coerce_datetime

    coerced = {n: coerce_datetime(v) for n, v in zip(_DATE_FIELDS, values, strict=True)}
    _last_dates = (key, coerced)
    return coerced


def execute_job(
    job: RunTask, ti: RuntimeTI, dag: DAG, log: logging.Logger, context: Context | None = None
) -> str | None:
    """Run the task (with ``context``, or a new :func:`job_context`); returns the rendered
    map index. Raises whatever the task raises."""
    from tailrace.sdk.errors import TaskExecutionTimeout
    from tailrace.sdk.execution import execute_task, render_map_index

    run = job.dag_run
    if context is None:
        context = job_context(job, ti, dag)
    task = context["task"]
    log.info(
        "%s %s.%s%s (run %s), try %d of %d on %s (pid %d)",
        f"Resuming ({job.next_method})" if job.next_method else "Running",
        job.dag_id,
        job.task_id,
        f"[{job.map_index}]" if job.map_index >= 0 else "",
        run.run_id,
        job.try_number,
        job.max_tries + 1,
        HOSTNAME,
        os.getpid(),
    )
    with deadline(
        job.execution_timeout,
        lambda: TaskExecutionTimeout(
            f"task {job.task_id!r} exceeded its execution_timeout of {job.execution_timeout:g}s"
        ),
    ):
        result = execute_task(
            task, context, next_method=job.next_method, next_kwargs=_next_kwargs(job), log=log
        )
    if job.next_method == HANDLE_TRIGGER_EVENTS:
        ti.stream_items.extend(_stream_item(job, item) for item in result)
    return render_map_index(context["task"], context)


def _next_kwargs(job: RunTask) -> dict[str, Any] | None:
    """The resume method's kwargs: the deferral's, plus the event (or batch) to handle."""
    from tailrace.sdk import TriggerEvent

    if not job.events:
        return job.next_kwargs
    kwargs = dict(job.next_kwargs or {})
    if job.next_method != HANDLE_TRIGGER_EVENTS:
        kwargs["event"] = loads(job.events[0].payload)
        return kwargs
    batch = []
    for envelope in job.events:
        event = TriggerEvent(loads(envelope.payload))
        event.trigger_run_id = envelope.trigger_run_id
        event.sequence_index = envelope.sequence_index
        event.is_last = envelope.is_last
        batch.append(event)
    kwargs["events"] = batch
    return kwargs


def _stream_item(job: RunTask, item: Any) -> str:
    try:
        return dumps(item)
    except TypeError as exc:
        raise TypeError(
            f"task {job.task_id!r} of DAG {job.dag_id!r}: handle_trigger_events produced an "
            f"item that cannot be stored in its output stream: {exc}"
        ) from None


def format_task_error(exc: BaseException) -> str:
    """The traceback from the first frame of user code on, secrets registered with the log
    masker masked: the error is stored and shown."""
    return redact(user_traceback(exc))


def deferral_of(exc: BaseException, job: RunTask) -> Deferral | None:
    """The deferral a ``TaskDeferred`` asks for, its trigger arguments checked for JSON."""
    from tailrace.sdk import TaskDeferred
    from tailrace.sdk.triggers import check_trigger_kwargs

    if not isinstance(exc, TaskDeferred):
        return None
    classpath, kwargs = exc.trigger.serialize()
    check_trigger_kwargs(kwargs, dag_id=job.dag_id, task_id=job.task_id)
    check_trigger_kwargs(exc.kwargs, dag_id=job.dag_id, task_id=job.task_id, what="resume")
    return Deferral(
        classpath=classpath,
        kwargs=dict(kwargs),
        method_name=exc.method_name,
        next_kwargs=dict(exc.kwargs or {}),
        timeout=exc.timeout.total_seconds() if exc.timeout is not None else None,
        consumer="batch" if exc.method_name == HANDLE_TRIGGER_EVENTS else "classic",
        timeout_outcome=getattr(exc, "timeout_outcome", "failed"),
    )


def _classify(exc: BaseException) -> Outcome:
    from tailrace.sdk.errors import FailTask, SkipTask

    if isinstance(exc, SkipTask):
        return "skipped"
    if isinstance(exc, FailTask):
        return "failed_no_retry"
    return "failed"


def _outcome_of(
    exc: BaseException, job: RunTask, log: logging.Logger
) -> tuple[Outcome, str | None, Deferral | None, BaseException]:
    """The outcome, error text and deferral of a try that raised, and the exception it
    ended with (a deferral whose trigger cannot be stored ends with that error)."""
    try:
        deferral = deferral_of(exc, job)
    except Exception as bad_trigger:  # an unserializable trigger fails the task, clearly
        exc = bad_trigger
        deferral = None
    if deferral is not None:
        return "deferred", None, deferral, exc
    outcome = _classify(exc)
    if outcome == "skipped":
        log.info("Task skipped: %s", exc)
        return outcome, None, None, exc
    error = format_task_error(exc)
    log.error("Task failed:\n%s", error.rstrip())
    return outcome, error, None, exc


def _run_end_callbacks(
    job: RunTask,
    context: Context,
    outcome: Outcome,
    raised: BaseException | None,
    log: logging.Logger,
) -> None:
    """The callback of the state this try leaves the task in, before it is reported:
    ``on_success_callback``, ``on_retry_callback`` (it failed and will be retried, by
    the rule the scheduler applies), ``on_failure_callback`` or ``on_skipped_callback``.
    A try that deferred, or handled events and waits for more, has not ended: none."""
    from tailrace.sdk.execution import CALLBACK_OF_STATE, run_callbacks

    if outcome in ("deferred", "handled"):
        return
    dead_letters = bool(job.events) and context["task"].stream_retry == "dead_letter"
    state = state_after_try(outcome, job.try_number, job.max_tries, dead_letters=dead_letters)
    name = CALLBACK_OF_STATE[state]
    if raised is not None and outcome != "skipped":
        context["exception"] = raised
    run_callbacks(context["task"], name, context, log)


def run_task(
    job: RunTask,
    conn: Channel,
    cache: DagFileCache,
    max_xcom_bytes: int,
    *,
    worker: str | None = None,
    log_in_background: bool = False,
) -> None:
    """Run one try and report it; the log file is finished after the report is sent
    (``log_in_background``: on this process's log thread, when the try is over).

    Only a broken channel to the owner escapes (the owner is gone); any other fault of the
    runtime's own fails this try with the error, and the worker takes the next one.
    """
    start = utcnow()
    conn.send_bytes(
        encode(
            TaskStarted(
                ti_id=job.ti_id,
                try_number=job.try_number,
                pid=os.getpid(),
                hostname=HOSTNAME,
                start_date=start,
                worker=worker,
            )
        )
    )
    context = logs.TaskLogContext(
        job.dag_id, job.dag_run.run_id, job.task_id, job.map_index, job.try_number
    )
    traced = tracing.enabled()
    with (
        logs.task_context(context),
        capture_task_logs(job.log_path, traced=traced) as log,
        _running_span(job, traced) as span,
    ):
        duration = None
        try:
            finished = _attempt(job, conn, cache, max_xcom_bytes, start, log)
            duration = (finished.end_date - start).total_seconds()
            report = encode(finished)
        except (OSError, EOFError):
            raise
        except Exception as exc:
            log.exception("The worker could not run or report this try")
            finished = TaskFinished(
                ti_id=job.ti_id,
                try_number=job.try_number,
                outcome="failed",
                start_date=start,
                end_date=utcnow(),
                error=f"the worker could not run or report this try: {exc!r}",
            )
            report = encode(finished)
        if span is not None:
            _annotate(span, finished)
        conn.send_bytes(report)
        if log_in_background and finished.outcome in _TRY_OVER:
            finish_log_later()
    if duration is not None:
        # After the report: a task's first observation makes a labelled series (a dozen
        # keys in this process's metrics file), and the owner need not wait for it.
        metrics.get().task_duration.labels(job.dag_id, job.task_id).observe(duration)


@contextlib.contextmanager
def _running_span(job: RunTask, traced: bool) -> Iterator[Span | None]:
    """The stint's span, current while the task runs: task code's own spans (and the HTTP
    provider's) are its children. Its parent came with the workload."""
    if not traced:
        yield None
        return
    attributes: dict[str, str | int] = {
        "tailrace.dag_id": job.dag_id,
        "tailrace.run_id": job.dag_run.run_id,
        "tailrace.task_id": job.task_id,
        "tailrace.map_index": job.map_index,
        "tailrace.try_number": job.try_number,
        "tailrace.events": len(job.events),
    }
    if job.next_method is not None:
        attributes["tailrace.next_method"] = job.next_method
    with tracing.live_span(
        "worker", "running", context=tracing.context_of(job.traceparent), attributes=attributes
    ) as span:
        yield span


def _annotate(span: Span, finished: TaskFinished) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("tailrace.outcome", finished.outcome)
    if finished.error is not None:
        span.set_status(Status(StatusCode.ERROR, finished.error[: tracing.STATUS_CHARS]))


def _attempt(
    job: RunTask,
    conn: Channel,
    cache: DagFileCache,
    max_xcom_bytes: int,
    start: datetime,
    log: logging.Logger,
) -> TaskFinished:
    ti = WorkerTaskInstance(job, conn, max_xcom_bytes)
    set_connection_source(ti.fetch_connection)
    set_variable_source(OwnerVariables(conn))
    outcome: Outcome = "success"
    error = None
    rendered = None
    deferral = None
    context: Context | None = None
    raised: BaseException | None = None
    asset_events: list[AssetEventReport] = []
    try:
        dag = load_dag(cache, job.fileloc, job.dag_id)
        context = job_context(job, ti, dag)
        rendered = execute_job(job, ti, dag, log, context)
        if job.events and not job.events[-1].is_last:
            outcome = "handled"  # more events may come: the task stays deferred
        else:
            asset_events = outlet_event_reports(context)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit from user code fails the task, not us
        outcome, error, deferral, raised = _outcome_of(exc, job, log)
    if context is not None:
        _run_end_callbacks(job, context, outcome, raised, log)
    if deferral is not None:
        if tracing.enabled():
            # The trigger run will be this span's child, in the triggerer.
            deferral = msgspec.structs.replace(deferral, traceparent=tracing.current_traceparent())
        log.info(
            "Deferring to %s until it fires; the worker slot is free meanwhile",
            deferral.classpath,
        )
    elif outcome == "handled":
        log.info(
            "Handled trigger events up to #%d; waiting for more", job.events[-1].sequence_index
        )
    else:
        log.info("Task finished: %s", outcome)
    return TaskFinished(
        ti_id=job.ti_id,
        try_number=job.try_number,
        outcome=outcome,
        start_date=start,
        end_date=utcnow(),
        error=error,
        xcoms=list(ti.pushed.values()) if outcome in _KEEPS_OUTPUT else [],
        skip_task_ids=sorted(ti.skipped) if outcome == "success" else [],
        rendered_map_index=rendered,
        deferral=deferral,
        callbacks_run=True,
        stream_items=ti.stream_items if outcome in _KEEPS_OUTPUT else [],
        acked_sequence=job.events[-1].sequence_index
        if job.events and outcome in ("success", "handled")
        else None,
        failed_events=(job.events[0].sequence_index, job.events[-1].sequence_index)
        if job.events and outcome == "failed"
        else None,
        streamed=ti.streamed,
        rendered_fields=_rendered_fields(context),
        asset_events=asset_events if outcome == "success" else [],
    )


def _rendered_fields(context: Context | None) -> dict[str, str] | None:
    """The try's templated fields as text for people: masked, and cut when long."""
    from tailrace.sdk.execution import rendered_template_fields

    rendered = rendered_template_fields(context["task"]) if context is not None else None
    if not rendered:
        return None
    out = {}
    for field, value in rendered.items():
        if isinstance(value, str):
            text = value
        else:
            try:
                text = dumps(value)
            except TypeError:
                text = repr(value)
        text = redact(text)
        if len(text) > RENDERED_FIELD_MAX_CHARS:
            text = (
                text[:RENDERED_FIELD_MAX_CHARS]
                + f"… (cut: {len(text):,} characters, the first {RENDERED_FIELD_MAX_CHARS:,} shown)"
            )
        out[field] = text
    return out


def run_dag_callback(
    job: RunDagCallback,
    cache: DagFileCache,
    conn: Channel | None = None,
    max_xcom_bytes: int = 1 << 20,
) -> DagCallbackFinished:
    """Call a finished run's DAG callbacks with the run's context, logging to the
    callback's own log file — or, for ``job.task``, the task's callbacks of a try that
    ended without a worker, with that try's context (its XComs read over ``conn``),
    logging to the try's log. One that raises is logged and the others still run, as in
    Airflow; no state changes."""
    from tailrace.sdk.execution import DagRunInfo, build_dag_run_context, run_callbacks

    if job.deadline is not None:
        return _run_deadline_callback(job, job.deadline, cache)
    name = f"on_{job.kind}_callback"
    tried = job.task
    with capture_task_logs(job.log_path) as log:
        log.info(
            # Not "Running …" in a try's log: that line starts a stint of the try.
            "%s %s of %s for run %s (%s) on %s (pid %d)",
            "Running" if tried is None else "Calling",
            name,
            f"DAG {job.dag_id}" if tried is None else f"task {job.dag_id}.{tried.task_id}",
            job.dag_run.run_id,
            f"reason: {job.reason}"
            if tried is None
            else f"try {tried.try_number} ended without a worker",
            HOSTNAME,
            os.getpid(),
        )
        try:
            dag = load_dag(cache, job.fileloc, job.dag_id)
            if tried is None:
                context = build_dag_run_context(
                    dag=dag,
                    dag_run=DagRunInfo(**msgspec.structs.asdict(job.dag_run)),
                    reason=job.reason,
                )
                failed = run_callbacks(dag, name, context, log)
            else:
                failed = _run_task_callback(job, tried, dag, name, conn, max_xcom_bytes, log)
        except Exception as exc:
            error = format_task_error(exc)
            log.error("The DAG callback could not run:\n%s", error.rstrip())
            return DagCallbackFinished(callback_id=job.callback_id, ok=False, error=error)
        if failed:
            return DagCallbackFinished(
                callback_id=job.callback_id,
                ok=False,
                error=f"{failed} of the DAG's {name} callables raised (see {job.log_path})",
            )
        log.info("%s finished", name)
        return DagCallbackFinished(callback_id=job.callback_id, ok=True)


def _run_deadline_callback(
    job: RunDagCallback, call: DeadlineCall, cache: DagFileCache
) -> DagCallbackFinished:
    """A missed deadline's SyncCallback (ADR 0037), with the deadline's context, logging
    to the run's deadline callback log."""
    from tailrace.sdk.execution import call_deadline_callback

    deadline = call.context["deadline"]
    with capture_task_logs(job.log_path) as log:
        log.info(
            "Calling %s: run %s of DAG %s missed its deadline %s (%s) on %s (pid %d)",
            call.path,
            job.dag_run.run_id,
            job.dag_id,
            deadline["name"] or f"#{deadline['id']}",
            deadline["deadline_time"],
            HOSTNAME,
            os.getpid(),
        )
        try:
            # The callable may be defined in the DAG file: its module is the file's.
            load_dag(cache, job.fileloc, job.dag_id)
            call_deadline_callback(call.path, call.kwargs, call.context)
        except Exception as exc:
            error = format_task_error(exc)
            log.error("The deadline callback raised:\n%s", error.rstrip())
            return DagCallbackFinished(callback_id=job.callback_id, ok=False, error=error)
        log.info("The deadline callback finished")
        return DagCallbackFinished(callback_id=job.callback_id, ok=True)


def _run_task_callback(
    job: RunDagCallback,
    tried: CallbackTry,
    dag: DAG,
    name: str,
    conn: Channel | None,
    max_xcom_bytes: int,
    log: logging.Logger,
) -> int:
    """The task's ``name`` callbacks with the context its try would have had; the try's
    error is ``context["exception"]`` (a failure or retry callback)."""
    from tailrace.sdk.errors import TryEndedWithoutWorker
    from tailrace.sdk.execution import run_callbacks

    as_run = RunTask(
        ti_id=tried.ti_id,
        dag_run_id=tried.dag_run_id,
        dag_id=job.dag_id,
        task_id=tried.task_id,
        map_index=tried.map_index,
        try_number=tried.try_number,
        max_tries=tried.max_tries,
        fileloc=job.fileloc,
        dag_run=job.dag_run,
        log_path=job.log_path,
    )
    ti = WorkerTaskInstance(as_run, conn, max_xcom_bytes) if conn is not None else None
    context = job_context(as_run, ti or RuntimeTI(as_run, max_xcom_bytes), dag)
    if tried.error is not None and job.kind in ("failure", "retry"):
        context["exception"] = TryEndedWithoutWorker(tried.error)
    return run_callbacks(context["task"], name, context, log)


def worker_main(conn: Connection, max_xcom_bytes: int) -> None:
    """Entry point of a pre-started worker process."""
    # The owner decides when we stop; Ctrl-C in a terminal must not kill tasks mid-write.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    prepare_import_path()
    # Its owner's metrics directory and log format.
    metrics.activate_from_environment()
    logs.configure_from_environment("worker")
    tracing.configure()
    root = logging.getLogger()
    if not root.handlers:
        # Nothing shows INFO outside a try here (the last-resort handler shows warnings,
        # as before), and a try then need not set and reset the root's level, which
        # clears every logger's cache each time.
        root.setLevel(logging.INFO)
    cache = DagFileCache()
    try:
        while True:
            try:
                msg = decode_to_worker(conn.recv_bytes())
                if isinstance(msg, Shutdown):
                    return
                if isinstance(msg, RunTask):
                    run_task(msg, conn, cache, max_xcom_bytes, log_in_background=True)
                elif isinstance(msg, RunDagCallback):
                    conn.send_bytes(encode(run_dag_callback(msg, cache, conn, max_xcom_bytes)))
            except (EOFError, OSError):
                return  # the pipe to the owner broke: it is gone, or replaces us
    finally:
        # A multiprocessing child skips atexit: write the logs and export the spans still
        # held in memory.
        drain_task_logs()
        tracing.shutdown()
