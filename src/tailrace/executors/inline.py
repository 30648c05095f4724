"""Run workloads in this process, one at a time, when told to: the time-skipping harness's
executor. The task runs through the worker runtime a pre-started worker uses (the same
report, the same requests answered by the owner), over a channel that is a function call
instead of a pipe; nothing runs until :meth:`InlineExecutor.run_pending` is called, so a
test decides when work happens.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from tailrace.dagfiles import DagFileCache
from tailrace.execution._worker import run_dag_callback, run_task
from tailrace.execution.protocol import (
    WORKER_REQUESTS,
    RunDagCallback,
    Workload,
    decode_from_worker,
    encode,
)
from tailrace.executors.base import BaseExecutor, EventSink, XComSource


class _Channel:
    """The worker's end of the pipe, answered on the spot: requests by the owner's
    source, reports to the owner's sink."""

    def __init__(self, on_event: EventSink, source: XComSource) -> None:
        self.on_event = on_event
        self._source = source
        self._replies: deque[bytes] = deque()

    def send_bytes(self, buf: bytes) -> None:
        msg = decode_from_worker(buf)
        if isinstance(msg, WORKER_REQUESTS):
            self._replies.append(encode(self._source(msg)))
        else:
            self.on_event(msg)

    def recv_bytes(self) -> bytes:
        return self._replies.popleft()


class InlineExecutor(BaseExecutor):
    def __init__(self, *, max_xcom_bytes: int = 1 << 20) -> None:
        self.max_xcom_bytes = max_xcom_bytes
        self._pending: deque[Workload] = deque()
        self._cache = DagFileCache()
        self.ran = 0

    def start(self, on_event: EventSink, xcom_source: XComSource) -> None:
        self._channel = _Channel(on_event, xcom_source)

    def queue_workloads(self, workloads: Sequence[Workload]) -> None:
        self._pending.extend(workloads)

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
        ran = 0
        while self._pending:
            work = self._pending.popleft()
            if isinstance(work, RunDagCallback):
                self._channel.on_event(run_dag_callback(work, self._cache))
            else:
                run_task(work, self._channel, self._cache, self.max_xcom_bytes)
            ran += 1
        self.ran += ran
        return ran

    def stop(self) -> None:
        self._pending.clear()
