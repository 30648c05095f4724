"""Run workloads in this process, through the worker runtime a pre-started worker uses
(the same report, the same requests answered by the owner), over a channel that is a
function call instead of a pipe.

Two callers, two paces: the time-skipping harness queues workloads and decides when
they run (:meth:`InlineExecutor.run_pending`); ``DAG.test()`` runs each one in the
thread that queues it (``at_once=True``), so a task's code runs where the caller can
step through it, and uses the DAG objects it holds instead of importing their files.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence

from tailrace.dagfiles import DagFileCache, LoadedFile
from tailrace.execution._worker import run_dag_callback, run_task
from tailrace.execution.protocol import (
    WORKER_REQUESTS,
    RunDagCallback,
    Workload,
    decode_from_worker,
    decode_to_worker,
    encode,
)
from tailrace.executors.base import BaseExecutor, EventSink, XComSource
from tailrace.sdk import DAG
from tailrace.sdk.errors import TailraceError


class _Channel:
    """The worker's end of the pipe, answered on the spot: requests by the owner's
    source, reports to the owner's sink. Answers are kept per thread: a trigger in the
    triggerer's thread may ask too, once a task has installed this as its source."""

    def __init__(self, on_event: EventSink, source: XComSource) -> None:
        self.on_event = on_event
        self._source = source
        self._replies = threading.local()

    def send_bytes(self, buf: bytes) -> None:
        msg = decode_from_worker(buf)
        if isinstance(msg, WORKER_REQUESTS):
            self._queue().append(encode(self._source(msg)))
        else:
            self.on_event(msg)

    def recv_bytes(self) -> bytes:
        queue = self._queue()
        if not queue:
            raise EOFError("the inline owner has nothing to answer")
        reply = queue.popleft()
        decode_to_worker(reply)  # a reply this owner cannot build fails here, not later
        return reply

    def _queue(self) -> deque[bytes]:
        queue: deque[bytes] | None = getattr(self._replies, "queue", None)
        if queue is None:
            queue = self._replies.queue = deque()
        return queue


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
    """``at_once``: run each workload as it is queued (``DAG.test()``); otherwise when
    :meth:`run_pending` is called. ``after_task`` is called with each finished workload."""

    def __init__(
        self,
        dags: Sequence[DAG] = (),
        *,
        at_once: bool = False,
        max_xcom_bytes: int = 1 << 20,
        after_task: Callable[[Workload], None] | None = None,
    ) -> None:
        self.max_xcom_bytes = max_xcom_bytes
        self._at_once = at_once
        self._after_task = after_task
        self._pending: deque[Workload] = deque()
        self._cache = _KnownDags(dags)
        self._channel: _Channel | None = None
        self.ran = 0

    def start(self, on_event: EventSink, xcom_source: XComSource) -> None:
        self._channel = _Channel(on_event, xcom_source)

    def queue_workloads(self, workloads: Sequence[Workload], *, backlog: bool = False) -> None:
        # A local worker takes one try at a time from its pipe: none travel together.
        self._pending.extend(workloads)
        if self._at_once:
            self.run_pending()

    def terminate(self, ti_ids: Sequence[int]) -> None:
        # Nothing runs between two calls of run_pending: only queued work can be stopped.
        doomed = set(ti_ids)
        self._pending = deque(
            w for w in self._pending if isinstance(w, RunDagCallback) or w.ti_id not in doomed
        )

    @property
    def pending(self) -> int:
        return len(self._pending)

    def run_pending(self) -> int:
        """Run every queued workload to its report, in order; returns how many ran."""
        if self._channel is None:
            raise TailraceError("InlineExecutor: workloads run only after start()")
        ran = 0
        while self._pending:
            work = self._pending.popleft()
            if isinstance(work, RunDagCallback):
                self._channel.on_event(run_dag_callback(work, self._cache))
            else:
                run_task(work, self._channel, self._cache, self.max_xcom_bytes)
            if self._after_task is not None:
                self._after_task(work)
            ran += 1
        self.ran += ran
        return ran

    def stop(self) -> None:
        self._pending.clear()
        self._channel = None
