"""The execution API: remote (Celery) workers report here instead of to a pipe (ADR 0009).

A worker POSTs the same msgpack messages a local worker writes to its owner's pipe; this
side applies them with the scheduler's own functions and tells the schedulers (NOTIFY)
which runs changed. Reports that arrive together commit together (`_GroupCommit`): many
workers' results cost one transaction, not one each, on one committer thread, so a
report waiting for its commit holds none of the handler threads. Every request carries
the per-try token the scheduler issued; a try that is no longer the instance's current
one is refused (409), so a redelivered or cleared try never runs twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec
from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool
from sqlalchemy import Connection, select

from tailrace import transitions
from tailrace.api._context import ApiContext, app_context
from tailrace.api.errors import (
    ApiError,
    BadRequest,
    Conflict,
    Forbidden,
    NotAuthenticated,
    NotFound,
)
from tailrace.clock import utcnow
from tailrace.config import REPORT_ENVELOPE_BYTES, secret_key_problem
from tailrace.db.models import Stream, TaskInstance
from tailrace.execution import GetXCom, TaskFinished, TaskStarted, log_path_for
from tailrace.execution.protocol import (
    LOG_BYTES_HEADER,
    MAX_POSTS,
    WORKER_REQUESTS,
    DagCallbackFinished,
    FromWorker,
    GetAssetEvents,
    GetStreamItems,
    Post,
    PostReply,
    StreamItems,
    VariableWrite,
    WorkerRequest,
    decode_from_worker,
    decode_posts,
    encode,
    encode_posts,
)
from tailrace.execution.tokens import (
    InvalidTaskTokenError,
    verify_callback_token,
    verify_task_token,
)
from tailrace.scheduler.reports import apply_executor_events, start_try
from tailrace.scheduler.versions import DagVersions
from tailrace.scheduler.worker_requests import answer_worker_request
from tailrace.state import TaskInstanceState as TIS
from tailrace.store import dag_callbacks

EXECUTION_PREFIX = "/execution/v1"
MSGPACK = "application/msgpack"

router = APIRouter(prefix=EXECUTION_PREFIX, include_in_schema=False)


def install(app: FastAPI) -> None:
    """Serve the execution API from ``app``, with the state its routes keep."""
    app.state.try_logs = _TryLogs()
    app.state.reports = _GroupCommit(app.state.tailrace, app.state.try_logs)
    app.include_router(router)


_versions = DagVersions()


class NotCurrent(Conflict):
    code = "try_not_current"


class Unavailable(ApiError):
    status_code = 503
    code = "execution_api_disabled"


def _grant(ctx: ApiContext, request: Request, ti_id: int) -> int:
    """The try number the request's token grants for ``ti_id``."""
    secret, token = _bearer(ctx, request, "task")
    return _granted(secret, token, ti_id)


def _granted(secret: str, token: str, ti_id: int) -> int:
    """The try number ``token`` grants for ``ti_id``."""
    try:
        granted_ti, try_number = verify_task_token(secret, token)
    except InvalidTaskTokenError as exc:
        raise NotAuthenticated(str(exc)) from None
    if granted_ti != ti_id:
        raise Forbidden(f"this token is for task instance {granted_ti}, not {ti_id}")
    return try_number


def _callback_grant(ctx: ApiContext, request: Request, callback_id: int) -> None:
    secret, token = _bearer(ctx, request, "callback")
    try:
        granted = verify_callback_token(secret, token)
    except InvalidTaskTokenError as exc:
        raise NotAuthenticated(str(exc)) from None
    if granted != callback_id:
        raise Forbidden(f"this token is for callback {granted}, not {callback_id}")


def _bearer(ctx: ApiContext, request: Request, kind: str) -> tuple[str, str]:
    """The secret tokens are signed with, and the request's token."""
    secret = _secret(ctx)
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise NotAuthenticated(f"a {kind} token is required (Authorization: Bearer …)")
    return secret, token.strip()


def _secret(ctx: ApiContext) -> str:
    """The secret tokens are signed with."""
    secret = ctx.settings.secret_key
    problem = secret_key_problem(ctx.settings)
    if problem is not None or secret is None:
        raise Unavailable(f"the execution API is off: {problem}")
    return secret


def _instance(conn: Connection, ti_id: int) -> Any:
    row = conn.execute(
        select(
            TaskInstance.id,
            TaskInstance.dag_run_id,
            TaskInstance.dag_id,
            TaskInstance.run_id,
            TaskInstance.task_id,
            TaskInstance.map_index,
            TaskInstance.state,
            TaskInstance.try_number,
            TaskInstance.pid,
            TaskInstance.hostname,
        ).where(TaskInstance.id == ti_id)
    ).first()
    if row is None:
        raise NotFound(f"task instance {ti_id} does not exist (was its run deleted?)")
    return row


def _not_current(row: Any, try_number: int) -> NotCurrent:
    return NotCurrent(
        f"try {try_number} of {row.dag_id}.{row.task_id} is no longer current (the instance "
        f"is at try {row.try_number}, state {row.state}): it was cleared, marked, timed out "
        "or is running elsewhere; stop it",
        detail={"state": row.state, "try_number": row.try_number},
    )


@router.get("/health")
async def health() -> dict[str, str]:
    """For workers checking at start that they can reach their owner."""
    return {"status": "ok"}


@router.post("/task-instances/{ti_id}/messages")
async def post_message(
    ti_id: int, request: Request, log_stint: str | None = None, log_offset: int | None = None
) -> Response:
    """A worker's message: a request answered in msgpack, or a report (204). It may carry
    the try's new log lines after it (their length in ``X-Tailrace-Log-Bytes``), which are
    appended first: a short try's log and result come in one request."""
    ctx = app_context(request)
    try_number = _grant(ctx, request, ti_id)
    body = await request.body()
    chunk = _log_chunk(request, body, log_stint, log_offset)
    if chunk is not None:
        body = body[: len(body) - len(chunk.data)]
    message = _message(ctx, body)
    reply = await run_in_threadpool(
        _handle_with_log, ctx, request.app.state, ti_id, try_number, message, chunk
    )
    return _reply(reply)


@router.post("/messages")
async def post_messages(request: Request) -> Response:
    """Messages of several tries in one request, each with its own token, handled in
    order as if each were posted alone to its ``/task-instances/<id>/messages``; the
    answer holds each one's status and reply (ADR 0051). A worker running a batch of tries
    sends a try's result with the next one's start."""
    ctx = app_context(request)
    secret = _secret(ctx)
    body = await request.body()
    try:
        posts = decode_posts(body)
    except msgspec.DecodeError as exc:
        raise BadRequest(f"not a list of posts: {exc}") from None
    if not 0 < len(posts) <= MAX_POSTS:
        raise BadRequest(f"a request carries 1 to {MAX_POSTS} posts, not {len(posts)}")
    state = request.app.state
    checked = _committed_posts(ctx, secret, posts)
    if checked is None:  # it asks something, or writes a Variable: in order, on a thread
        replies = await run_in_threadpool(_handle_posts, ctx, state, secret, posts)
    else:  # starts and reports only (a batch's every request): to the committer
        reports = [r for r in checked if isinstance(r, _Report)]
        await state.reports.submit_async(reports)
        verdicts = iter(
            await run_in_threadpool(_verdicts, ctx, reports)
            if any(_refused(r) for r in reports)
            else _verdicts(ctx, reports)
        )
        replies = [r if isinstance(r, PostReply) else next(verdicts) for r in checked]
    return Response(encode_posts(replies), media_type=MSGPACK)


def _committed_posts(
    ctx: ApiContext, secret: str, posts: list[Post]
) -> list[_Report | PostReply] | None:
    """Each post as a report to commit, or the error that refuses it; None if one is
    neither a start nor a report."""
    checked: list[_Report | PostReply] = []
    for post in posts:
        try:
            try_number, message, chunk = _read_post(ctx, secret, post)
        except ApiError as exc:
            checked.append(PostReply(exc.status_code, exc.message.encode()))
            continue
        if not isinstance(message, _COMMITTED):
            return None
        log = (post.ti_id, try_number, chunk) if chunk is not None else None
        checked.append(_Report(message, log))
    return checked


def _read_post(
    ctx: ApiContext, secret: str, post: Post
) -> tuple[int, FromWorker, _LogChunk | None]:
    """The try number the post's token grants, its message (a start or report for that
    very try) and the log lines that came with it."""
    try_number = _granted(secret, post.token, post.ti_id)
    message = _message(ctx, post.message)
    if isinstance(message, _COMMITTED):
        _check_grant(message, post.ti_id, try_number)
    if not post.log:
        return try_number, message, None
    if post.log_stint is None or post.log_offset is None:
        raise BadRequest("a post's log lines come with their log_stint and log_offset")
    return try_number, message, _LogChunk(post.log_stint, post.log_offset, post.log)


def _handle_posts(ctx: ApiContext, state: Any, secret: str, posts: list[Post]) -> list[PostReply]:
    """Each post as if alone, in order; starts and reports next to each other commit
    together (with whatever other requests bring meanwhile)."""
    replies: list[PostReply] = []
    together: list[_Report] = []
    for post in posts:
        try:
            try_number, message, chunk = _read_post(ctx, secret, post)
            if chunk is not None:
                _append_log(ctx, state.try_logs, post.ti_id, try_number, chunk)
            if isinstance(message, _COMMITTED):
                together.append(_Report(message))
                continue
            replies += _commit_together(ctx, state, together)
            together = []
            reply = _handle(ctx, state, post.ti_id, try_number, message)
        except ApiError as exc:
            replies += _commit_together(ctx, state, together)
            together = []
            replies.append(PostReply(exc.status_code, exc.message.encode()))
        else:
            replies.append(PostReply(204) if reply is None else PostReply(200, reply))
    return replies + _commit_together(ctx, state, together)


def _commit_together(ctx: ApiContext, state: Any, together: list[_Report]) -> list[PostReply]:
    if not together:
        return []
    return _verdicts(ctx, state.reports.submit(together))


def _refused(report: _Report) -> bool:
    """Whether the report's try was not current: its answer says what the instance is."""
    return report.error is None and not report.applied


def _verdicts(ctx: ApiContext, reports: list[_Report]) -> list[PostReply]:
    """Each applied report's answer (204), or why it was refused."""
    replies = []
    for report in reports:
        if isinstance(report.error, ApiError):
            replies.append(PostReply(report.error.status_code, report.error.message.encode()))
        elif report.error is not None:
            raise report.error
        elif _refused(report):
            with ctx.readonly.connect() as conn:
                row = _instance(conn, report.message.ti_id)
            refused = _not_current(row, report.message.try_number)
            replies.append(PostReply(refused.status_code, refused.message.encode()))
        else:
            replies.append(PostReply(204))
    return replies


def _log_chunk(
    request: Request, body: bytes, stint: str | None, offset: int | None
) -> _LogChunk | None:
    declared = request.headers.get(LOG_BYTES_HEADER)
    if declared is None:
        return None
    if not declared.isdigit() or int(declared) > len(body) or stint is None or offset is None:
        raise BadRequest(
            f"{LOG_BYTES_HEADER} must count the body's last bytes (at most {len(body):,}) "
            "and come with the log_stint and log_offset parameters"
        )
    return _LogChunk(stint, offset, body[len(body) - int(declared) :])


def _handle_with_log(
    ctx: ApiContext,
    state: Any,
    ti_id: int,
    try_number: int,
    message: FromWorker,
    chunk: _LogChunk | None,
) -> bytes | None:
    if chunk is not None:
        _append_log(ctx, state.try_logs, ti_id, try_number, chunk)
    return _handle(ctx, state, ti_id, try_number, message)


@router.post("/callbacks/{callback_id}/messages")
async def post_callback_message(callback_id: int, request: Request) -> Response:
    """A remote worker running a callback (ADR 0034): its task's XCom reads, answered in
    msgpack, and its end (204), while the callback is queued."""
    ctx = app_context(request)
    _callback_grant(ctx, request, callback_id)
    message = _message(ctx, await request.body())
    return _reply(await run_in_threadpool(_handle_callback, ctx, callback_id, message))


def _message(ctx: ApiContext, body: bytes) -> FromWorker:
    if len(body) > ctx.settings.max_payload_bytes + REPORT_ENVELOPE_BYTES:
        raise ApiError(
            f"a report of {len(body):,} bytes is over the limit "
            f"({ctx.settings.max_payload_bytes:,} bytes of payload, max_payload_bytes)",
            code="payload_too_large",
        )
    try:
        return decode_from_worker(body)
    except msgspec.DecodeError as exc:
        raise BadRequest(f"not a worker message: {exc}") from None


def _reply(reply: bytes | None) -> Response:
    if reply is None:
        return Response(status_code=204)
    return Response(reply, media_type=MSGPACK)


def _handle_callback(ctx: ApiContext, callback_id: int, message: FromWorker) -> bytes | None:
    if isinstance(message, DagCallbackFinished):
        if message.callback_id != callback_id:
            raise Forbidden(
                f"the message is for callback {message.callback_id}; "
                f"the token grants callback {callback_id}"
            )
        with ctx.engine.begin() as conn:
            _queued_callback(conn, callback_id)
            dag_callbacks.finish(conn, callback_id, message.ok, message.error, utcnow())
        return None
    if isinstance(message, VariableWrite):
        with ctx.engine.begin() as conn:
            _queued_callback(conn, callback_id)
            return encode(answer_worker_request(conn, message))
    if isinstance(message, WORKER_REQUESTS):
        with ctx.readonly.connect() as conn:
            row = _queued_callback(conn, callback_id)
            _check_request(conn, row, message)
            return encode(answer_worker_request(conn, message))
    raise BadRequest(
        f"a callback sends its reads, Variable writes and its end, not {type(message).__name__}"
    )


def _queued_callback(conn: Connection, callback_id: int) -> Any:
    row = dag_callbacks.get(conn, callback_id)
    if row is None:
        raise NotFound(f"callback {callback_id} does not exist (was its run deleted?)")
    if row.state != dag_callbacks.QUEUED:
        raise NotCurrent(
            f"callback {callback_id} is {row.state}, not queued: it already ended, or a "
            "scheduler handed it over again",
            detail={"state": row.state},
        )
    return row


def _handle(
    ctx: ApiContext, state: Any, ti_id: int, try_number: int, message: FromWorker
) -> bytes | None:
    if isinstance(message, VariableWrite):
        with ctx.engine.begin() as conn:
            _check_current(conn, ti_id, try_number)
            return encode(answer_worker_request(conn, message))
    if isinstance(message, WORKER_REQUESTS):
        with ctx.readonly.connect() as conn:
            row = _check_current(conn, ti_id, try_number)
            _check_request(conn, row, message)
            return encode(answer_worker_request(conn, message))
    if isinstance(message, DagCallbackFinished):
        raise BadRequest(
            "a callback's end is reported to /callbacks/<id>/messages, with its own token"
        )
    _check_grant(message, ti_id, try_number)
    if not state.reports.apply(message):
        with ctx.readonly.connect() as conn:
            raise _not_current(_instance(conn, ti_id), try_number)
    return None


def _check_grant(message: _Committed, ti_id: int, try_number: int) -> None:
    if message.ti_id != ti_id or message.try_number != try_number:
        raise Forbidden(
            f"the message is for task instance {message.ti_id} try {message.try_number}; "
            f"the token grants task instance {ti_id} try {try_number}"
        )


def _check_current(conn: Connection, ti_id: int, try_number: int) -> Any:
    # A token's grant ends with its try: a finished or superseded try reads nothing.
    row = _instance(conn, ti_id)
    if row.try_number != try_number or row.state not in transitions.ACCEPTING_REPORTS:
        raise _not_current(row, try_number)
    return row


# What a worker sends that commits with others: its try's start and its reports.
_Committed = TaskStarted | TaskFinished | StreamItems
_COMMITTED = (TaskStarted, TaskFinished, StreamItems)


class _Report:
    def __init__(self, message: _Committed, log: tuple[int, int, _LogChunk] | None = None) -> None:
        self.message = message
        # The try's log lines that came with it (ti id, try number, lines): written first.
        self.log = log
        self.done = False
        self.applied = False
        self.error: BaseException | None = None


class _Waiter:
    """Reports submitted together, and how their submitter hears they are done: an event
    for a thread, a future for the event loop."""

    def __init__(self, reports: list[_Report]) -> None:
        self.reports = reports
        self.event: threading.Event | None = None
        self.future: asyncio.Future[None] | None = None


# The committer thread ends after this long with nothing to commit (the next report
# starts another): an api-server at rest, or a test's app, keeps no thread.
_COMMITTER_IDLE_SECONDS = 10.0


class _GroupCommit:
    """Applies tries' starts and reports many to a transaction, on one thread of its own:
    what requests bring while a commit is under way goes together in the next. One thread
    at the database and the loop's thread at the sockets: request handlers do not contend
    for the interpreter lock and the commit at every query, as a thread per request did."""

    def __init__(self, ctx: ApiContext, logs: _TryLogs | None = None) -> None:
        self._ctx = ctx
        self._logs = logs or _TryLogs()
        # Held while a batch applies: what arrives meanwhile waits for the next.
        self._commit = threading.Lock()
        self._changed = threading.Condition()
        self._waiters: list[_Waiter] = []
        self._thread: threading.Thread | None = None

    def waiting(self) -> int:
        """Reports submitted and not yet taken into a commit."""
        with self._changed:
            return sum(len(w.reports) for w in self._waiters)

    def apply(self, message: _Committed) -> bool:
        """True if it applied; False if its try is no longer current (a start that is
        not raises why)."""
        [report] = self.submit([_Report(message)])
        if report.error is not None:
            raise report.error
        return report.applied

    def submit(self, reports: list[_Report]) -> list[_Report]:
        """From a thread: apply these in one transaction (with whatever else is waiting);
        their verdicts."""
        waiter = _Waiter(reports)
        waiter.event = threading.Event()
        self._enqueue(waiter)
        waiter.event.wait()
        return reports

    async def submit_async(self, reports: list[_Report]) -> list[_Report]:
        """:meth:`submit` for the event loop."""
        waiter = _Waiter(reports)
        waiter.future = asyncio.get_running_loop().create_future()
        self._enqueue(waiter)
        await waiter.future
        return reports

    def _enqueue(self, waiter: _Waiter) -> None:
        with self._changed:
            self._waiters.append(waiter)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="execution-api-commits", daemon=True
                )
                self._thread.start()
            self._changed.notify()

    def _run(self) -> None:
        while True:
            with self._changed:
                if not self._waiters and not self._changed.wait_for(
                    lambda: self._waiters, timeout=_COMMITTER_IDLE_SECONDS
                ):
                    self._thread = None
                    return
            with self._commit:
                with self._changed:
                    waiters, self._waiters = self._waiters, []
                reports = [r for w in waiters for r in w.reports]
                try:
                    self._write_logs(reports)
                    self._apply_batch([r for r in reports if r.error is None])
                except BaseException as exc:  # never leave a request waiting
                    for report in reports:
                        if not report.done:
                            report.error, report.done = exc, True
                finally:
                    _wake(waiters)

    def _write_logs(self, reports: list[_Report]) -> None:
        """The lines that came with each report, before it applies."""
        for report in reports:
            if report.log is not None:
                try:
                    _append_log(self._ctx, self._logs, *report.log)
                except Exception as exc:  # unwritable: this report fails, not the batch
                    report.error, report.done = exc, True

    def _apply_batch(self, batch: list[_Report]) -> None:
        if not batch:
            return
        try:
            _commit_reports(self._ctx, self._logs, batch)
        except Exception as exc:
            if len(batch) == 1:
                batch[0].error = exc
            else:
                # One report that cannot be applied must not fail the others with it.
                for report in batch:
                    self._apply_batch([report])
        finally:
            for report in batch:
                report.done = True


def _wake(waiters: list[_Waiter]) -> None:
    """Tell each submitter its reports are done: the loop's once per loop."""
    futures: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
    for waiter in waiters:
        if waiter.event is not None:
            waiter.event.set()
        elif waiter.future is not None:
            futures.setdefault(waiter.future.get_loop(), []).append(waiter.future)
    for loop, done in futures.items():
        with contextlib.suppress(RuntimeError):  # its loop closed: nobody waits
            loop.call_soon_threadsafe(_settle, done)


def _settle(futures: list[asyncio.Future[None]]) -> None:
    for future in futures:
        if not future.done():
            future.set_result(None)


def _commit_reports(ctx: ApiContext, logs: _TryLogs, batch: list[_Report]) -> None:
    now = utcnow()
    starts = [(r, r.message) for r in batch if isinstance(r.message, TaskStarted)]
    # The transitions' hooks (the timeline's rows) are told once, for results and starts.
    with ctx.engine.begin() as conn, transitions.batched(conn):
        messages = [r.message for r in batch if not isinstance(r.message, TaskStarted)]
        applied = apply_executor_events(conn, messages, _versions.task, now)
        for report, started in starts:
            report.error = None  # a first attempt's verdict, when the batch is split
            try:
                _start(ctx, conn, logs, started, now)
            except NotCurrent as exc:
                report.error = exc
        ctx.wakeups.notify_runs(conn, applied.runs)  # delivered at commit
    for report in batch:
        if isinstance(report.message, TaskStarted):
            report.applied = report.error is None
        else:
            report.applied = (report.message.ti_id, report.message.try_number) in applied.reports
    ctx.wakeups.wake_runs(applied.runs)
    if applied.triggers_changed or applied.acked_triggers:
        ctx.wakeups.send("triggerer")


def _check_request(conn: Connection, row: Any, message: WorkerRequest) -> None:
    """A task reads its own run's XComs and streams (and any connection, as local tasks do)."""
    if isinstance(message, GetXCom) and message.dag_run_id != row.dag_run_id:
        raise Forbidden("a task may read XComs of its own run only")
    if isinstance(message, GetStreamItems):
        run_id = conn.scalar(
            select(TaskInstance.dag_run_id)
            .join(Stream, Stream.task_instance_id == TaskInstance.id)
            .where(Stream.id == message.stream_id)
        )
        if run_id != row.dag_run_id:
            raise Forbidden("a task may read streams of its own run only")
    if (
        isinstance(message, GetAssetEvents)
        and message.dag_run_id is not None
        and message.dag_run_id != row.dag_run_id
    ):
        raise Forbidden("a task may read the triggering asset events of its own run only")


def _start(
    ctx: ApiContext, conn: Connection, logs: _TryLogs, message: TaskStarted, now: datetime
) -> None:
    started = start_try(conn, message, heartbeat=now)
    if started is not None:
        # Where its log goes: its chunks then need no read of the instance.
        logs.remember(
            message.ti_id, message.try_number, _log_path(ctx, started, message.try_number)
        )
        return
    row = _instance(conn, message.ti_id)
    # The same start sent twice (its answer was lost): already running, by this worker.
    again = (
        row.state == TIS.RUNNING
        and row.try_number == message.try_number
        and (row.pid, row.hostname) == (message.pid, message.hostname)
    )
    if not again:
        raise _not_current(row, message.try_number)


@router.post("/task-instances/{ti_id}/heartbeat")
async def heartbeat(ti_id: int, request: Request) -> Response:
    """The worker still runs this try; 409 tells it to stop (the try is no longer current)."""
    ctx = app_context(request)
    try_number = _grant(ctx, request, ti_id)
    await run_in_threadpool(_heartbeat, ctx, ti_id, try_number)
    return Response(status_code=204)


def _heartbeat(ctx: ApiContext, ti_id: int, try_number: int) -> None:
    with ctx.engine.begin() as conn:
        if transitions.heartbeat(conn, ti_id, try_number, utcnow()):
            return
        row = _instance(conn, ti_id)
        if not (row.try_number == try_number and row.state in (TIS.QUEUED, TIS.DEFERRED)):
            raise _not_current(row, try_number)


@router.post("/task-instances/{ti_id}/logs")
async def append_log(ti_id: int, stint: str, offset: int, request: Request) -> Response:
    """Append a chunk of the try's log: bytes from ``offset`` of what the worker wrote in
    this ``stint`` (one run of the try on a worker). Bytes sent twice are written once."""
    ctx = app_context(request)
    try_number = _grant(ctx, request, ti_id)
    chunk = _LogChunk(stint, offset, await request.body())
    await run_in_threadpool(_append_log, ctx, request.app.state.try_logs, ti_id, try_number, chunk)
    return Response(status_code=204)


@dataclass(frozen=True)
class _LogChunk:
    stint: str
    offset: int
    data: bytes


class _TryLogs:
    """Recent tries' log files, and how far each stint was written: what a worker sends
    again (a retried request, a shipment that overlaps one whose answer was lost) is
    written once."""

    def __init__(self, size: int = 10_000) -> None:
        self._written: OrderedDict[tuple[int, int, str], int] = OrderedDict()
        self._paths: OrderedDict[tuple[int, int], Path] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def new_bytes(self, ti_id: int, try_number: int, chunk: _LogChunk) -> bytes:
        """What of ``chunk`` was not written yet (counted as written from now on)."""
        key = (ti_id, try_number, chunk.stint)
        with self._lock:
            written = self._written.pop(key, 0)
            data = chunk.data[max(0, written - chunk.offset) :]
            self._written[key] = max(written, chunk.offset + len(chunk.data))
            _bound(self._written, self._size)
        return data

    def path(self, ti_id: int, try_number: int) -> Path | None:
        with self._lock:
            return self._paths.get((ti_id, try_number))

    def remember(self, ti_id: int, try_number: int, path: Path) -> None:
        with self._lock:
            self._paths[(ti_id, try_number)] = path
            _bound(self._paths, self._size)


def _bound(recent: OrderedDict[Any, Any], size: int) -> None:
    while len(recent) > size:
        recent.popitem(last=False)


def _append_log(
    ctx: ApiContext, logs: _TryLogs, ti_id: int, try_number: int, chunk: _LogChunk
) -> None:
    data = logs.new_bytes(ti_id, try_number, chunk)
    if not data:
        return
    path = logs.path(ti_id, try_number)
    if path is None:
        with ctx.readonly.connect() as conn:
            path = _log_path(ctx, _instance(conn, ti_id), try_number)
        logs.remember(ti_id, try_number, path)
    # Appends of one write() are whole lines: the triggerer's lines may interleave, never
    # split one of ours.
    try:
        log_file = open(path, "ab")  # noqa: SIM115
    except FileNotFoundError:  # the try's first lines here
        path.parent.mkdir(parents=True, exist_ok=True)
        log_file = open(path, "ab")  # noqa: SIM115
    with log_file:
        log_file.write(data)


def _log_path(ctx: ApiContext, row: Any, try_number: int) -> Path:
    return log_path_for(
        ctx.settings.log_folder, row.dag_id, row.run_id, row.task_id, row.map_index, try_number
    )
