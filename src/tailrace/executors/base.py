"""The executor interface: the scheduler hands over workloads and hears back events."""

from __future__ import annotations

import _thread
import abc
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from tailrace.execution import DagCallbackFinished, TaskFinished, TaskStarted, Workload
from tailrace.execution.protocol import StreamItems, WorkerReply, WorkerRequest

ExecutorEvent = TaskStarted | StreamItems | TaskFinished | DagCallbackFinished
EventSink = Callable[[ExecutorEvent], None]
# Answers a worker's requests (XCom values, stream pages, connections) from the database.
XComSource = Callable[[WorkerRequest], WorkerReply]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerVerdict:
    """What a remote executor knows of its workers: those alive now, and those lost
    since last asked (node name -> when last heard). A worker in neither was not heard
    (it may have started a moment ago): it is lost once nothing was heard of it — nor of
    its tries — for ``lost_after`` seconds."""

    alive: frozenset[str]
    lost: dict[str, datetime]
    lost_after: float


def interrupt_main(reason: str) -> None:
    """The default for an executor that can no longer run tasks: stop the process (its
    main thread gets KeyboardInterrupt), so nothing heartbeats on without an executor."""
    log.critical("%s; stopping", reason)
    _thread.interrupt_main()


class BaseExecutor(abc.ABC):
    """Runs workloads somewhere else and reports their progress to ``on_event``.

    ``on_event`` is called from the executor's own thread; it must be cheap and
    thread-safe (the scheduler just puts the event on its inbox).

    A *remote* executor's workers outlive the scheduler and report through the
    api-server, not ``on_event``; their tries are judged by their own heartbeats.
    """

    remote = False
    # Called (from the executor's thread) when it can no longer run tasks; the component
    # that owns it stops and exits non-zero. Set before start().
    on_fatal: Callable[[str], None] = staticmethod(interrupt_main)
    # Called (from the executor's thread) when it found workers lost: ask worker_verdict.
    on_workers_lost: Callable[[], None] = staticmethod(lambda: None)
    # Remote executors: how long a running try may go unheard, a queued one untaken.
    heartbeat_timeout = 60.0
    queued_timeout = 600.0
    # Tries lost with their worker run again at once, without costing a retry, this
    # often per instance (ADR 0024).
    lost_try_requeues = 3

    @abc.abstractmethod
    def start(self, on_event: EventSink, xcom_source: XComSource) -> None: ...

    @abc.abstractmethod
    def queue_workloads(self, workloads: Sequence[Workload], *, backlog: bool = False) -> None:
        """Run these tries and DAG callbacks (``RunDagCallback``). ``backlog``: the
        workers already have a try waiting for each one they run, so these wait anyway
        (a remote executor sends them together, ADR 0051)."""

    @abc.abstractmethod
    def terminate(self, ti_ids: Sequence[int]) -> None:
        """Stop these task instances if they are running (cleared or marked by a user)."""

    @abc.abstractmethod
    def stop(self) -> None: ...

    def worker_verdict(self) -> WorkerVerdict | None:
        """Remote executors that can tell: which workers are alive and which were lost;
        None when they cannot tell (yet)."""
        return None

    def workers_handled(self, names: Iterable[str]) -> None:
        """The losses of these workers (from `worker_verdict`) are committed."""
        return None
