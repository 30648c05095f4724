"""An executor that runs each workload in the calling thread, in this process: what
``DAG.test()`` runs its tasks with. No worker processes, so a task's code runs where the
caller can step through it; the scheduler waits while a task runs."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from tailrace.dagfiles import DagFileCache, LoadedFile
from tailrace.execution import RunTask
from tailrace.execution._worker import run_task
from tailrace.execution.protocol import (
    StreamItems,
    TaskFinished,
    TaskStarted,
    WorkerRequest,
    decode_from_worker,
    decode_to_worker,
    encode,
)
from tailrace.executors.base import BaseExecutor, EventSink, XComSource
from tailrace.sdk import DAG
from tailrace.sdk.errors import TailraceError

log = logging.getLogger(__name__)


class _InlineChannel:
    """A worker's pipe to an owner in the same thread: a request is answered as it is
    sent; the answer waits for the worker's next receive (per thread: a trigger in the
    triggerer's thread may ask too, once a task has installed this as its source)."""

    def __init__(self, on_event: EventSink, answer: XComSource) -> None:
        self._on_event = on_event
        self._answer = answer
        self._replies = threading.local()

    def send_bytes(self, data: bytes) -> None:
        message = decode_from_worker(data)
        if isinstance(message, WorkerRequest):
            self._replies.reply = encode(self._answer(message))
        elif isinstance(message, TaskStarted | StreamItems | TaskFinished):
            self._on_event(message)

    def recv_bytes(self) -> bytes:
        reply: bytes | None = getattr(self._replies, "reply", None)
        if reply is None:
            raise EOFError("the inline owner has nothing to answer")
        self._replies.reply = None
        decode_to_worker(reply)  # a reply this owner cannot build fails here, not later
        return reply


class _KnownDags(DagFileCache):
    """The DAG objects the caller holds, instead of importing their files again."""

    def __init__(self, dags: Sequence[DAG]) -> None:
        super().__init__()
        self._dags = {dag.fileloc: dag for dag in dags}

    def get(self, path: str) -> LoadedFile:
        dag = self._dags.get(path)
        if dag is None:
            return super().get(path)
        return LoadedFile(path=path, dags={dag.dag_id: dag})


class InlineExecutor(BaseExecutor):
    """Runs workloads one after another in the thread that queues them.

    ``dags`` are used as they are (not re-imported from their files); ``after_task`` is
    called with each finished workload (``DAG.test()`` prints its log).
    """

    def __init__(
        self,
        dags: Sequence[DAG] = (),
        *,
        max_xcom_bytes: int = 10 * 1024 * 1024,
        after_task: Callable[[RunTask], None] | None = None,
    ) -> None:
        self._cache = _KnownDags(dags)
        self._max_xcom_bytes = max_xcom_bytes
        self._after_task = after_task
        self._channel: _InlineChannel | None = None

    def start(self, on_event: EventSink, xcom_source: XComSource) -> None:
        self._channel = _InlineChannel(on_event, xcom_source)

    def queue_workloads(self, workloads: Sequence[RunTask]) -> None:
        if self._channel is None:
            raise TailraceError("InlineExecutor.queue_workloads() before start()")
        for job in workloads:
            run_task(job, self._channel, self._cache, self._max_xcom_bytes)
            if self._after_task is not None:
                self._after_task(job)

    def terminate(self, ti_ids: Sequence[int]) -> None:
        # Nothing runs between calls: a workload is done before queue_workloads returns.
        return None

    def stop(self) -> None:
        self._channel = None
