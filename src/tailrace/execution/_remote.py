"""Running a workload on a remote (Celery) worker: the owner is the execution API.

The task runner is the local workers' (``run_task``); only its channel differs. Where a
local worker writes msgpack messages to its owner's pipe, a remote one POSTs them to the
api-server with the try's token (ADR 0009). Beside the task, the process's watch thread
heartbeats the try and ships its log in chunks; when the API says the try is no longer
current (the user cleared it, it timed out, another worker has it) the task is stopped at
once. A broker message may carry a batch of tries, run one after another: a try's result
then goes with the next one's start, and what has not begun after ``BATCH_SECONDS`` goes
back to the broker (ADR 0051).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import signal
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import httpx
import msgspec

from tailrace import metrics, tracing
from tailrace.config import REPORT_ENVELOPE_BYTES
from tailrace.dagfiles import DagFileCache, prepare_import_path
from tailrace.execution._logs import held_log_lines, held_log_lines_delivered
from tailrace.execution._worker import run_dag_callback, run_task
from tailrace.execution.protocol import (
    LOG_BYTES_HEADER,
    Post,
    PostReply,
    RunDagCallback,
    RunTask,
    decode_post_replies,
    encode,
    encode_posts,
    message_type,
)
from tailrace.providers.errors import HttpError
from tailrace.providers.http import HttpHook
from tailrace.sdk.errors import TailraceError

log = logging.getLogger(__name__)

# Transient failures (the api-server or its database restarting, a proxy hiccup) are
# retried this often: about five minutes at the backoff's 5 s ceiling.
RETRIES = 64
# The log is shipped this often while the task runs.
LOG_SHIP_SECONDS = 0.5
# A batch's tries not begun after this long go back to the broker, for any free worker.
BATCH_SECONDS = 1.0
# A try's report waits for the next try's start only up to this size (a large one goes
# at once): the two go in one request, under the api-server's request limit.
OWED_BYTES = REPORT_ENVELOPE_BYTES // 2
MSGPACK = "application/msgpack"


class ExecutionApiError(TailraceError):
    """The execution API refused a request for a reason retrying won't fix."""


class TryNotCurrentError(ExecutionApiError):
    """The try was cleared, marked, timed out or taken by another worker: stop it."""


class ExecutionApiChannel:
    """One try's connection to the execution API: a drop-in for a worker's pipe. (Or one
    callback's, with ``callback_id`` and that callback's token: ADR 0034.)"""

    def __init__(
        self,
        base_url: str,
        ti_id: int | None,
        token: str,
        *,
        callback_id: int | None = None,
        retries: int = RETRIES,
        client: httpx.Client | None = None,
    ) -> None:
        # A worker process keeps one client for all its tries: its connections stay open,
        # and a client costs milliseconds to make (its TLS context) — on every hop.
        self._own_client = client is None
        self._client = client or new_client()
        path = f"task-instances/{ti_id}" if callback_id is None else f"callbacks/{callback_id}"
        self._base = f"{base_url.rstrip('/')}/execution/v1"
        self._prefix = f"{self._base}/{path}"
        self._ti_id = ti_id
        self._token = token
        self._headers = {"Authorization": f"Bearer {token}"}
        # The providers' retry policy: backoff that honours the API's Retry-After (a
        # restarting database answers 503), transport errors retried alike.
        self._retrying = HttpHook(
            None,
            base_url=base_url,
            max_retries=retries,
            retry_backoff=0.2,
            max_retry_wait=5.0,
            logger=log,
            trace=False,  # its reports are the hop the try's spans already show
        )
        self._reply: bytes | None = None
        # The try's log, whose new lines go with each message (``carry_log``).
        self._log: _Companion | None = None
        # In a batch: the report of the try before, sent with this try's first message.
        self._relay: _Relay | None = None

    def carry_log(self, companion: _Companion) -> None:
        """Send the log's new complete lines with each message: a short try's whole log
        then goes with its result, in the same request."""
        self._log = companion

    def close(self) -> None:
        if self._own_client:
            self._client.close()

    # -- the pipe's interface, for run_task -------------------------------------------

    def relay_through(self, relay: _Relay) -> None:
        """Run as one of a batch's tries (ADR 0051): its report may wait to go with the
        next try's start, and the report of the try before goes with its first message."""
        self._relay = relay

    def send_bytes(self, buf: bytes) -> None:
        if self._relay is not None:
            self._relay_bytes(self._relay, buf)
            return
        headers = {"Content-Type": MSGPACK}
        if self._log is None:
            response = self._post("/messages", buf, headers)
        else:
            with self._log.shipping() as (stint, offset, lines):
                params: dict[str, str | int] = {}
                if lines:
                    headers[LOG_BYTES_HEADER] = str(len(lines))
                    params = {"log_stint": stint, "log_offset": offset}
                response = self._post("/messages", buf + lines, headers, params)
        self._reply = response.content if response.status_code == 200 else None

    def _relay_bytes(self, relay: _Relay, buf: bytes) -> None:
        with self._log.shipping() if self._log is not None else _no_lines() as lines:
            stint, offset, data = lines
            post = Post(self._ti_id or 0, self._token, buf, data, stint, offset)
            if relay.more and _size(post) <= OWED_BYTES and message_type(buf) == "TaskFinished":
                relay.owe(_Owed(post, self, self._log))
                self._reply = None
                return
            owed = relay.take(room=REPORT_ENVELOPE_BYTES - _size(post))
            try:
                reply = self.post_many([owed.post] if owed is not None else [], post)
            finally:
                if owed is not None:
                    owed.delivered()
        assert reply is not None
        if reply.status >= 400:
            _refuse(reply.status, reply.body.decode(errors="replace")[:500])
        self._reply = reply.body if reply.status == 200 else None

    def post_many(self, owed: list[Post], post: Post | None) -> PostReply | None:
        """Post tries' reports that are owed, and this try's message, in one request. The
        owed ones' answers are only logged (their tries are over); the answer to ``post``
        is returned."""
        posts = [*owed, post] if post is not None else owed
        try:
            response = self._retrying.run(
                f"{self._base}/messages",
                "POST",
                client=self._client,
                check_response=False,
                content=encode_posts(posts),
                headers={"Content-Type": MSGPACK},
            )
        except HttpError as exc:
            raise ExecutionApiError(f"the execution API did not answer: {exc}") from None
        replies = decode_post_replies(_checked(response).content)
        for sent, reply in zip(owed, replies, strict=False):
            if reply.status >= 400:
                log.warning(
                    "the report of task instance %s was refused: %s",
                    sent.ti_id,
                    reply.body.decode(errors="replace")[:500],
                )
        return replies[len(owed)] if post is not None else None

    def recv_bytes(self) -> bytes:
        reply, self._reply = self._reply, None
        if reply is None:
            raise ExecutionApiError("the execution API sent no answer to the request")
        return reply

    # -- beside the task ---------------------------------------------------------------

    def heartbeat(self) -> None:
        self._post("/heartbeat", b"")

    def ship_log(self, stint: str, offset: int, chunk: bytes) -> None:
        self._post("/logs", chunk, params={"stint": stint, "offset": offset})

    def _post(
        self,
        path: str,
        content: bytes,
        headers: dict[str, str] | None = None,
        params: dict[str, str | int] | None = None,
    ) -> httpx.Response:
        try:
            response = self._retrying.run(
                self._prefix + path,
                "POST",
                client=self._client,
                check_response=False,
                content=content,
                headers={**self._headers, **(headers or {})},
                params=params,
            )
        except HttpError as exc:  # the API never answered, through every retry
            raise ExecutionApiError(f"the execution API did not answer: {exc}") from None
        return _checked(response)


def new_client() -> httpx.Client:
    return httpx.Client(timeout=httpx.Timeout(30.0, connect=5.0))


def _size(post: Post) -> int:
    return len(post.message) + len(post.log)


class _Relay:
    """A batch's report that waits for the next try's first message (ADR 0051)."""

    def __init__(self) -> None:
        self.owed: _Owed | None = None
        # Whether another try of the batch may follow (else a report goes at once).
        self.more = True

    def owe(self, owed: _Owed) -> None:
        self.flush()  # never two: a try begins by delivering the one before
        self.owed = owed
        if owed.companion is not None:
            owed.companion.held_back = True

    def take(self, room: int) -> _Owed | None:
        """What is owed, to go with a message that leaves it ``room`` bytes; if it does
        not fit, it goes now, alone."""
        if self.owed is not None and _size(self.owed.post) > room:
            self.flush()
        owed, self.owed = self.owed, None
        return owed

    def flush(self) -> None:
        """Send what is owed now: the batch is over, or what comes next is too big to
        go with it."""
        owed, self.owed = self.owed, None
        if owed is None:
            return
        try:
            owed.channel.post_many([owed.post], None)
        finally:
            owed.delivered()


@dataclass
class _Owed:
    post: Post
    channel: ExecutionApiChannel
    companion: _Companion | None

    def delivered(self) -> None:
        """The rest of the try's log follows its report, never precedes it."""
        if self.companion is not None:
            self.companion.finish_later()


@contextlib.contextmanager
def _no_lines() -> Iterator[tuple[str, int, bytes]]:
    yield "", 0, b""


def _checked(response: httpx.Response) -> httpx.Response:
    if response.status_code < 400:
        return response
    try:
        message = response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = response.text[:500]
    _refuse(response.status_code, message)


def _refuse(status: int, message: str) -> NoReturn:
    """The execution API's refusal of a request (or of one post in it), as an error."""
    if status == 409:
        raise TryNotCurrentError(message)
    raise ExecutionApiError(f"the execution API answered {status}: {message}")


class _Companion:
    """Heartbeats the try and ships its log while the task runs. The process's watch
    thread (`_Watch`) does it every ``LOG_SHIP_SECONDS``; a try over sooner never meets
    it, and costs no thread of its own."""

    def __init__(
        self,
        channel: ExecutionApiChannel,
        log_path: Path,
        heartbeat_seconds: float,
        before_kill: Callable[[], None] = lambda: None,
    ) -> None:
        self._channel = channel
        self._before_kill = before_kill
        # Its try's report waits for the next try's start: the log's end goes after it.
        self.held_back = False
        self._path = log_path
        self._heartbeat_seconds = heartbeat_seconds
        self._stint = uuid.uuid4().hex
        self._shipped = 0
        # One shipment at a time: two of the same offset would be taken for one sent twice.
        self._shipping = threading.Lock()
        # Held by the watch thread while it does this try's turn: once the try is over it
        # takes no more (a heartbeat then would be refused, and end the process).
        self._turn = threading.Lock()
        self._over = False
        self._next_turn = time.monotonic() + LOG_SHIP_SECONDS
        self._next_beat = time.monotonic() + heartbeat_seconds

    def __enter__(self) -> _Companion:
        _watch.add(self)
        return self

    def __exit__(self, *exc: object) -> None:
        with self._turn:
            self._over = True
        _watch.discard(self)
        if not self.held_back:
            self.finish_later()

    def finish_later(self) -> None:
        # Whatever the try wrote last goes after its result, off the task's path: the
        # process may take its next task meanwhile.
        _background(self._finish)

    def _finish(self) -> None:
        self.ship_log()
        self._path.unlink(missing_ok=True)

    def turn(self, now: float) -> None:
        """The watch thread's: the log's new lines, and a heartbeat when one is due."""
        with self._turn:
            if self._over or now < self._next_turn:
                return
            self._next_turn = now + LOG_SHIP_SECONDS
            try:
                self.ship_log()
                if now >= self._next_beat:
                    self._next_beat = now + self._heartbeat_seconds
                    self._channel.heartbeat()
            except TryNotCurrentError as exc:
                log.error("stopping the task: %s", exc)
                with contextlib.suppress(Exception):
                    self.ship_log()
                self._before_kill()
                # The task may be anywhere (in C code, asleep): end its process. The
                # Celery pool starts another in its place.
                os.kill(os.getpid(), signal.SIGKILL)
            except ExecutionApiError as exc:
                log.warning("could not reach the execution API: %s", exc)

    def ship_log(self) -> None:
        """Send the log's new complete lines (all of it once the try is over)."""
        with self.shipping() as (stint, offset, data):
            if data:
                self._channel.ship_log(stint, offset, data)

    @contextlib.contextmanager
    def shipping(self) -> Iterator[tuple[str, int, bytes]]:
        """The log's new complete lines (all of it once the try is over), with their stint
        and offset; counted as shipped if the block ends without an error. In the try's
        thread, lines not yet in the file count too (a short try's whole log)."""
        with self._shipping:
            held = held_log_lines()
            if held is not None:
                data = held[self._shipped :]
            else:
                try:
                    with open(self._path, "rb") as log_file:
                        log_file.seek(self._shipped)
                        data = log_file.read()
                except FileNotFoundError:
                    data = b""
            if not self._over:
                data = data[: data.rfind(b"\n") + 1]
            yield self._stint, self._shipped, data
            self._shipped += len(data)
            if held is not None:
                held_log_lines_delivered(self._shipped)


class _Watch:
    """The tries of this process that are running, and the one thread that gives each a
    turn (`_Companion.turn`) every ``LOG_SHIP_SECONDS``."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._companions: set[_Companion] = set()
        self._thread: threading.Thread | None = None

    def add(self, companion: _Companion) -> None:
        with self._lock:
            self._companions.add(companion)
            # Started by the first try (in a pool process: a fork does not copy threads).
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="try-watch", daemon=True)
                self._thread.start()
            elif len(self._companions) == 1:
                self._lock.notify()

    def discard(self, companion: _Companion) -> None:
        with self._lock:
            self._companions.discard(companion)

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._companions:  # an idle process costs no wake-ups
                    self._lock.wait()
            # A try's turn comes at most a fifth of the period late.
            time.sleep(LOG_SHIP_SECONDS / 5)
            with self._lock:
                companions = list(self._companions)
            for companion in companions:
                try:
                    companion.turn(time.monotonic())
                except Exception:
                    # One try's trouble (its log unreadable) must not stop the other
                    # tries' heartbeats: without them they would be taken for lost.
                    log.exception("a running try's heartbeat or log shipment failed")


_watch = _Watch()
_jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
_jobs_thread: threading.Thread | None = None


def _background(job: Callable[[], None]) -> None:
    """Run ``job`` on this process's one background thread, in order."""
    global _jobs_thread
    if _jobs_thread is None or not _jobs_thread.is_alive():
        _jobs_thread = threading.Thread(target=_run_jobs, name="log-shipper", daemon=True)
        _jobs_thread.start()
    _jobs.put(job)


def _run_jobs() -> None:
    while True:
        job = _jobs.get()
        try:
            job()
        except Exception as exc:
            log.warning("could not ship the end of a try's log: %s", exc)


_cache: DagFileCache | None = None
_client: httpx.Client | None = None


@dataclass(frozen=True)
class RemoteRun:
    """Where a worker's tries report, and its limits."""

    api_url: str
    spool_folder: Path
    max_xcom_bytes: int
    heartbeat_timeout: float
    worker: str | None = None


class _Batch:
    """The tries of one broker message, in order (ADR 0051). What has not begun when the
    batch has run ``BATCH_SECONDS``, or when its process is about to be killed, goes back
    to the broker for any free worker."""

    def __init__(
        self, members: list[list[str]], send_back: Callable[[list[list[str]]], None]
    ) -> None:
        self._left = deque(members)
        self._send_back = send_back
        self._lock = threading.Lock()

    def take(self) -> tuple[list[str] | None, bool]:
        """The next try, and whether another follows it."""
        with self._lock:
            member = self._left.popleft() if self._left else None
            return member, bool(self._left)

    def hand_back(self) -> None:
        with self._lock:
            if not self._left:
                return
            rest = list(self._left)
            try:
                self._send_back(rest)
            except Exception as exc:  # the broker is away: this process runs them after all
                log.warning("could not hand %d tries back to the broker: %s", len(rest), exc)
                return
            self._left.clear()
            metrics.get().celery_tries_handed_back.inc(len(rest))
            log.info("%d tries of this batch go back to the broker", len(rest))


def run_remote_batch(
    members: list[list[str]], run: RemoteRun, send_back: Callable[[list[list[str]]], None]
) -> None:
    """Run a batch of tries sent as one broker message, one after another, each with its
    own token; a try's report goes with the next one's start (ADR 0051)."""
    batch = _Batch(members, send_back)
    relay = _Relay()
    timer = threading.Timer(BATCH_SECONDS, batch.hand_back)
    timer.daemon = True
    timer.start()
    try:
        while True:
            member, relay.more = batch.take()
            if member is None:
                break
            workload, token = member
            run_remote_workload(workload, token, run, relay=relay, before_kill=batch.hand_back)
    except BaseException:
        batch.hand_back()
        raise
    finally:
        timer.cancel()
        relay.flush()


def run_remote_workload(
    workload: str,
    token: str,
    run: RemoteRun,
    *,
    relay: _Relay | None = None,
    before_kill: Callable[[], None] = lambda: None,
) -> None:
    """Run one try sent through the broker, reporting to the execution API."""
    global _cache, _client
    if _cache is None:
        prepare_import_path()
        _cache = DagFileCache()
    if _client is None:
        _client = new_client()
    job = msgspec.json.decode(workload, type=RunTask)
    # The try's log is spooled here and shipped; the api-server's copy is what users read
    # (and, on a machine it shares with the worker, it must not be this file).
    # A folder per pool process: a second copy of the same try (sent again when a worker
    # was lost) is refused at its start, and must not ship or delete the first's spool.
    # Flat, by instance and try: no folders to make per try, none left behind.
    spool = run.spool_folder / str(os.getpid()) / f"ti-{job.ti_id}-try-{job.try_number}.log"
    job = msgspec.structs.replace(job, log_path=str(spool))
    channel = ExecutionApiChannel(run.api_url, job.ti_id, token, client=_client)
    if relay is not None:
        channel.relay_through(relay)
    beat = max(1.0, run.heartbeat_timeout / 6)
    try:
        with (
            _Companion(channel, spool, beat, before_kill) as companion,
            _received_span(job) as job,
        ):
            channel.carry_log(companion)
            run_task(job, channel, _cache, run.max_xcom_bytes, worker=run.worker)
    except TryNotCurrentError as exc:
        log.warning("not running %s.%s: %s", job.dag_id, job.task_id, exc)
    finally:
        channel.close()


@contextlib.contextmanager
def _received_span(job: RunTask) -> Iterator[RunTask]:
    """The Celery hop's consumer side, in the worker's pool process: the try's running span
    is its child."""
    if job.traceparent is None or not tracing.enabled():
        yield job
        return
    from opentelemetry.trace import SpanKind

    with tracing.live_span(
        "worker",
        "celery.run",
        context=tracing.context_of(job.traceparent),
        kind=SpanKind.CONSUMER,
        attributes={
            "messaging.system": "celery",
            "messaging.destination.name": job.queue,
            "tailrace.task_id": job.task_id,
            "process.pid": os.getpid(),
        },
    ):
        yield msgspec.structs.replace(job, traceparent=tracing.current_traceparent())


def run_remote_dag_callback(
    workload: str, token: str | None = None, *, api_url: str | None = None
) -> None:
    """Run a callback sent through the broker; its log is written on this machine, at the
    path the scheduler chose under its log folder. With a callback token (ADR 0034), a
    task's callback reads its run's XComs and the callback's end is reported through the
    execution API; a message from a scheduler before that carries none, and reports
    nothing (the row stays queued)."""
    global _cache, _client
    if _cache is None:
        prepare_import_path()
        _cache = DagFileCache()
    job = msgspec.json.decode(workload, type=RunDagCallback)
    if token is None or api_url is None:
        done = run_dag_callback(job, _cache)
    else:
        if _client is None:
            _client = new_client()
        channel = ExecutionApiChannel(
            api_url, None, token, callback_id=job.callback_id, client=_client
        )
        try:
            done = run_dag_callback(job, _cache, channel)
            channel.send_bytes(encode(done))
        except TryNotCurrentError as exc:
            log.warning("the callback %s is no longer queued: %s", job.callback_id, exc)
            return
        finally:
            channel.close()
    if not done.ok:
        log.warning(
            "the callback of %s (run %s) failed: %s", job.dag_id, job.dag_run.run_id, done.error
        )
