"""The Celery executor: workloads through a broker to `tailrace worker` on any machine.

Celery is the transport only (ADR 0009): the scheduler sends each try to the queue its
operator names, with a token for that try; a worker runs it with the local workers' task
runner and reports through the api-server's execution API. No result backend, no Celery
retries (Tailrace's own retry rules apply), and messages are acknowledged as their task
starts, so a worker killed mid-task never has its try delivered again. The scheduler hears
the workers' heartbeats through the broker (`_worker_watch`): a worker that goes silent
for ``worker_lost_timeout`` has lost the tries it ran, which run again at once, and the
scheduler sends again what that worker may have taken but not started (ADR 0024).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from tailrace import metrics
from tailrace.config import ConfigError, Settings, broker_problem, secret_key_problem
from tailrace.execution import RunDagCallback, RunTask, Workload
from tailrace.execution.tokens import LIFETIME_SECONDS, issue_callback_token, issue_task_token
from tailrace.executors._worker_watch import WorkerWatch
from tailrace.executors.base import BaseExecutor, EventSink, WorkerVerdict, XComSource

if TYPE_CHECKING:
    from tailrace.execution._remote import RemoteRun

log = logging.getLogger(__name__)

TASK_NAME = "tailrace.run_task"
BATCH_TASK_NAME = "tailrace.run_tasks"
# While the broker holds a backlog, a dispatch's tries go this many to a message (ADR 0051).
BATCH_TRIES = 16
CALLBACK_TASK_NAME = "tailrace.run_dag_callback"
# Celery's hard time limit past a task's execution_timeout (which interrupts it first).
HARD_TIMEOUT_GRACE = 10.0
# A send that failed (the broker is down) is tried again after this long.
SEND_RETRY_SECONDS = 1.0


def celery_app(settings: Settings) -> Any:
    """The Celery application of a deployment; the same on schedulers and workers."""
    from celery import Celery

    if (problem := broker_problem(settings)) is not None:
        raise ConfigError("celery_broker_url", problem)
    app = Celery("tailrace", broker=settings.celery_broker_url, set_as_current=False)
    app.conf.update(
        task_acks_late=False,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        result_backend=None,
        task_serializer="json",
        accept_content=["json"],
        task_default_queue="default",
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
        # Only worker events (online, a heartbeat every 2 s, offline) are published: the
        # schedulers' watch of which workers are alive (ADR 0024).
        worker_send_task_events=False,
        # Redis: take a message only when a pool process is free, so a worker that dies
        # holds nothing it has not started (RabbitMQ returns unacknowledged messages to
        # the queue when a consumer's connection drops; Celery supports this on Redis).
        worker_disable_prefetch=_is_redis(settings.celery_broker_url),
    )

    # One line per report would drown the task's own lines in its log.
    logging.getLogger("httpx").setLevel(logging.WARNING)

    def remote_run(worker: str) -> RemoteRun:
        from tailrace import tracing
        from tailrace.execution._remote import RemoteRun

        tracing.configure()
        return RemoteRun(
            api_url=settings.execution_api,
            spool_folder=settings.home / "worker-log-spool",
            max_xcom_bytes=settings.max_payload_bytes,
            heartbeat_timeout=settings.task_heartbeat_timeout,
            worker=worker,
        )

    @app.task(name=TASK_NAME, ignore_result=True, bind=True)  # type: ignore[untyped-decorator]
    def run_workload(self: Any, workload: str, token: str) -> None:
        from tailrace.execution._remote import run_remote_workload

        run_remote_workload(workload, token, remote_run(self.request.hostname))

    @app.task(name=BATCH_TASK_NAME, ignore_result=True, bind=True)  # type: ignore[untyped-decorator]
    def run_workloads(self: Any, members: list[list[str]], queue: str) -> None:
        from tailrace.execution._remote import run_remote_batch

        def send_back(rest: list[list[str]]) -> None:
            self.app.send_task(BATCH_TASK_NAME, args=[rest, queue], queue=queue)

        run_remote_batch(members, remote_run(self.request.hostname), send_back)

    @app.task(name=CALLBACK_TASK_NAME, ignore_result=True)  # type: ignore[untyped-decorator]
    def run_dag_callback(workload: str, token: str | None = None) -> None:
        from tailrace.execution._remote import run_remote_dag_callback

        run_remote_dag_callback(workload, token, api_url=settings.execution_api)

    from celery.signals import worker_init, worker_process_shutdown

    @worker_init.connect(weak=False)  # type: ignore[untyped-decorator]
    def _import_the_runner(**_: object) -> None:
        preload_task_runner()

    @worker_process_shutdown.connect(weak=False)  # type: ignore[untyped-decorator]
    def _export_spans(**_: object) -> None:
        from tailrace import tracing

        tracing.shutdown()

    return app


# What a try needs that a pool process would otherwise import at its first one.
_RUNNER_MODULES = ("pendulum", "tailrace.execution._remote", "tailrace.sdk.execution")


def preload_task_runner() -> None:
    """Import what a try runs with (the runner, the task SDK's execution side, pendulum)
    in a worker's main process before its pool forks: every pool process starts with
    them, and its first try does not wait for the imports. DAG files are not imported
    here: a broken one must not take the worker down."""
    for module in _RUNNER_MODULES:
        importlib.import_module(module)


def _is_redis(url: str | None) -> bool:
    return (url or "").split("://", 1)[0] in ("redis", "rediss")


@contextlib.contextmanager
def _send_span(workload: RunTask, task_id: str) -> Iterator[RunTask]:
    """The Celery hop's producer side: a span around the send, which the workload then
    carries (the worker's consumer span is its child)."""
    from tailrace import tracing

    if workload.traceparent is None or not tracing.enabled():
        yield workload
        return
    from opentelemetry.trace import SpanKind

    with tracing.live_span(
        "scheduler",
        "celery.send",
        context=tracing.context_of(workload.traceparent),
        kind=SpanKind.PRODUCER,
        attributes={
            "messaging.system": "celery",
            "messaging.destination.name": workload.queue,
            "messaging.message.id": task_id,
            "tailrace.task_id": workload.task_id,
        },
    ):
        yield msgspec.structs.replace(workload, traceparent=tracing.current_traceparent())


@dataclass(frozen=True)
class _Batch:
    tries: list[RunTask]


def _batched(workloads: Sequence[Workload]) -> list[Workload | _Batch]:
    """Tries that may travel together (ADR 0051), by queue, up to ``BATCH_TRIES`` to a
    message: not a try with an execution_timeout (Celery's hard time limit is per
    message), a resumed one, or a DAG callback. The rest go alone."""
    alone: list[Workload | _Batch] = []
    by_queue: dict[str, list[RunTask]] = {}
    for w in workloads:
        if isinstance(w, RunTask) and w.execution_timeout is None and w.next_method is None:
            by_queue.setdefault(w.queue, []).append(w)
        else:
            alone.append(w)
    for tries in by_queue.values():
        for i in range(0, len(tries), BATCH_TRIES):
            chunk = tries[i : i + BATCH_TRIES]
            alone.append(_Batch(chunk) if len(chunk) > 1 else chunk[0])
    return alone


def _hard_limit(workload: RunTask) -> float | None:
    """Celery's hard time limit: past a task's execution_timeout, which interrupts it first."""
    if not workload.execution_timeout:
        return None
    return workload.execution_timeout + HARD_TIMEOUT_GRACE


class CeleryExecutor(BaseExecutor):
    """Sends workloads to the broker from its own thread; hears back nothing (workers
    report to the api-server, which wakes the schedulers)."""

    remote = True

    def __init__(self, settings: Settings) -> None:
        if (problem := secret_key_problem(settings)) is not None or not settings.secret_key:
            raise ConfigError("secret_key", f"the Celery executor signs a token per try: {problem}")
        self.app = celery_app(settings)
        self._secret = settings.secret_key
        self.heartbeat_timeout = settings.task_heartbeat_timeout
        self.queued_timeout = settings.task_queued_timeout
        self.lost_try_requeues = settings.lost_try_requeues
        self._watch = WorkerWatch(self.app, settings.worker_lost_timeout)
        self._pending: deque[Workload | _Batch] = deque()
        self._sent: OrderedDict[int, str] = OrderedDict()  # ti id -> Celery task id
        self._terminate: set[int] = set()
        self._lock = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.sent = 0

    def start(self, on_event: EventSink, xcom_source: XComSource) -> None:
        self._thread = threading.Thread(target=self._send_loop, name="celery-sender", daemon=True)
        self._thread.start()
        self._watch.on_lost = lambda: self.on_workers_lost()
        self._watch.start()

    def worker_verdict(self) -> WorkerVerdict | None:
        return self._watch.verdict()

    def workers_handled(self, names: Iterable[str]) -> None:
        self._watch.handled(names)

    def queue_workloads(self, workloads: Sequence[Workload], *, backlog: bool = False) -> None:
        with self._lock:
            self._pending.extend(_batched(workloads) if backlog else workloads)
            self._lock.notify()

    def terminate(self, ti_ids: Sequence[int]) -> None:
        with self._lock:
            self._terminate.update(ti_ids)
            kept: deque[Workload | _Batch] = deque()
            for item in self._pending:
                if isinstance(item, _Batch):
                    item = _Batch([w for w in item.tries if w.ti_id not in self._terminate])
                    if item.tries:
                        kept.append(item)
                elif not isinstance(item, RunTask) or item.ti_id not in self._terminate:
                    kept.append(item)
            self._pending = kept
            self._lock.notify()

    def stop(self) -> None:
        self._watch.stop()
        with self._lock:
            self._stopping = True
            self._lock.notify()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _send_loop(self) -> None:
        while True:
            with self._lock:
                while not (self._pending or self._terminate or self._stopping):
                    self._lock.wait()
                if self._stopping and not self._pending:
                    return
                doomed, self._terminate = self._terminate, set()
                # Taken off the queue here, so terminate() filters only what is unsent.
                batch, self._pending = list(self._pending), deque()
            self._revoke(doomed)
            unsent = self._send_all(batch)
            if unsent:
                with self._lock:
                    self._pending.extendleft(reversed(unsent))
                    if self._stopping:
                        return  # the broker is away: task_queued_timeout covers them
                    self._lock.wait(SEND_RETRY_SECONDS)

    def _send_all(self, batch: list[Workload | _Batch]) -> list[Workload | _Batch]:
        """Publish in order; what could not be sent (the broker is down) is returned."""
        sent = 0
        try:
            with self.app.producer_or_acquire() as producer:
                for workload in batch:
                    self._send(producer, workload)
                    sent += 1
        except Exception as exc:
            # A try no worker ever receives fails after task_queued_timeout.
            log.warning(
                "could not send to the Celery broker (%s); retrying in %.0fs",
                exc,
                SEND_RETRY_SECONDS,
            )
        return batch[sent:]

    def _send(self, producer: Any, workload: Workload | _Batch) -> None:
        if isinstance(workload, _Batch):
            self._send_batch(producer, workload)
            return
        if isinstance(workload, RunDagCallback):
            # Its token lets the worker read the task's XComs and report the end.
            token = issue_callback_token(self._secret, workload.callback_id)
            self.app.send_task(
                CALLBACK_TASK_NAME,
                args=[msgspec.json.encode(workload).decode(), token],
                queue=workload.queue,
                task_id=f"tailrace-dag-callback-{workload.callback_id}",
                producer=producer,
            )
            self.sent += 1
            return
        limit = _hard_limit(workload)
        task_id = f"tailrace-{workload.ti_id}-{workload.try_number}"
        if workload.next_method is not None:
            task_id += f"-{workload.next_method}-{self.sent}"
        with _send_span(workload, task_id) as workload:
            self.app.send_task(
                TASK_NAME,
                args=[msgspec.json.encode(workload).decode(), self._token(workload)],
                queue=workload.queue,
                task_id=task_id,
                time_limit=limit,
                producer=producer,
            )
        self.sent += 1
        self._sent[workload.ti_id] = task_id
        if len(self._sent) > 100_000:
            self._sent.popitem(last=False)

    def _send_batch(self, producer: Any, batch: _Batch) -> None:
        """Tries that travel together: one message, run one after another by one worker
        process, each with its own token. They are not revoked (a message of several
        cannot be killed for one): a cleared one is refused at its start, or stopped at
        its next heartbeat."""
        first = batch.tries[0]
        task_id = f"tailrace-batch-{first.ti_id}-{first.try_number}-{self.sent}"
        members = []
        with contextlib.ExitStack() as spans:
            for workload in batch.tries:
                workload = spans.enter_context(_send_span(workload, task_id))
                members.append([msgspec.json.encode(workload).decode(), self._token(workload)])
            # The queue goes with the batch: what is not begun goes back to the same one.
            self.app.send_task(
                BATCH_TASK_NAME,
                args=[members, first.queue],
                queue=first.queue,
                task_id=task_id,
                producer=producer,
            )
        self.sent += len(members)
        metrics.get().celery_batched_tries.inc(len(members))

    def _token(self, workload: RunTask) -> str:
        # The token lives as long as the try may: waiting for a worker, then running.
        limit = _hard_limit(workload)
        lifetime = self.queued_timeout + (limit if limit is not None else LIFETIME_SECONDS)
        return issue_task_token(
            self._secret, workload.ti_id, workload.try_number, lifetime=lifetime
        )

    def _revoke(self, ti_ids: set[int]) -> None:
        """Kill the Celery tasks of cleared or marked instances (their next heartbeat would
        stop them anyway)."""
        task_ids = [self._sent[ti] for ti in ti_ids if ti in self._sent]
        if task_ids:
            with contextlib.suppress(Exception):
                self.app.control.revoke(task_ids, terminate=True, signal="SIGKILL")
