"""The scheduler's inbox: everything that wakes it, typed, and one step's worth gathered.

Executor events (a try started, yielded items, finished) come from the executor's thread;
wake-ups from the CLI, the API, the parser and other schedulers; "events arrived" from an
in-process triggerer. A step takes all that is there at once, waiting a few milliseconds
more when what came is a lone start (its finish follows within milliseconds) or a remote
report (they arrive one notice each), so one transaction applies more.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass

import msgspec

from tailrace.execution import TaskStarted
from tailrace.executors.base import ExecutorEvent

START_COALESCE_SECONDS = 0.01
RUNS_COALESCE_SECONDS = 0.005
# While runs wait for a slot, the executor holds more workloads than its workers run: a
# step that gathers reports this long starts no task later, and takes more of them (a
# step that costs less would otherwise run once per report, its fixed statements each time).
SATURATED_COALESCE_SECONDS = 0.005
# The same with a remote executor whose broker holds tries no worker has started: each
# worker that frees up takes one of those, not one this step would send (ADR 0048).
BACKLOG_COALESCE_SECONDS = 0.025


class Wake(msgspec.Struct, frozen=True):
    """Something changed elsewhere (a new run, an unpause, a parse): look around."""


class EventsArrived(msgspec.Struct, frozen=True):
    """Triggers have new durable events, or asset watchers new asset events; which
    triggers, and whether assets, is kept beside the queue."""


class RunsChanged(msgspec.Struct, frozen=True):
    """Instances of these runs changed elsewhere (a remote worker's report applied)."""

    run_ids: frozenset[int]


_WAKE = Wake()
_EVENTS = EventsArrived()
InboxItem = ExecutorEvent | Wake | EventsArrived | RunsChanged


@dataclass(frozen=True)
class Collected:
    events: list[ExecutorEvent]
    woken: bool
    changed_runs: frozenset[int]
    triggers_with_events: frozenset[int]
    # An in-process triggerer wrote asset events (an asset watcher's): consumers may be due.
    asset_events: bool = False


class Inbox:
    """Thread-safe: any thread puts, the scheduler's loop collects."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[InboxItem] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._triggers_with_events: set[int] = set()
        self._asset_events = False

    def put(self, item: InboxItem) -> None:
        self._queue.put(item)

    def wake(self) -> None:
        self._queue.put(_WAKE)

    def runs_changed(self, run_ids: Collection[int]) -> None:
        self._queue.put(RunsChanged(frozenset(run_ids)))

    def events_arrived(self, trigger_ids: Collection[int]) -> None:
        with self._lock:
            self._triggers_with_events.update(trigger_ids)
        self._queue.put(_EVENTS)

    def asset_events_arrived(self) -> None:
        with self._lock:
            self._asset_events = True
        self._queue.put(_EVENTS)

    def empty(self) -> bool:
        with self._lock:
            if self._triggers_with_events or self._asset_events:
                return False
        return self._queue.empty()

    def collect(self, timeout: float, *, wait: bool = True, gather: float = 0.0) -> Collected:
        """Wait up to ``timeout`` for the first item (not at all unless ``wait``), then
        take everything there is (``gather``: every executor slot is taken, so reports
        are gathered this many seconds longer)."""
        items: list[InboxItem] = []
        if wait:
            with contextlib.suppress(queue.Empty):
                items.append(
                    self._queue.get(timeout=timeout) if timeout > 0 else self._queue.get_nowait()
                )
        self._drain(items)
        pause = _coalesce_for(items)
        if pause:
            with contextlib.suppress(queue.Empty):
                items.append(self._queue.get(timeout=pause))
                self._drain(items)
        if gather and items and not any(isinstance(i, Wake) for i in items):
            self._gather(items, time.monotonic() + gather)
        with self._lock:
            with_events, self._triggers_with_events = self._triggers_with_events, set()
            assets, self._asset_events = self._asset_events, False
        changed: set[int] = set()
        events: list[ExecutorEvent] = []
        for item in items:
            if isinstance(item, RunsChanged):
                changed |= item.run_ids
            elif not isinstance(item, Wake | EventsArrived):
                events.append(item)
        return Collected(
            events=events,
            woken=any(isinstance(i, Wake) for i in items),
            changed_runs=frozenset(changed),
            triggers_with_events=frozenset(with_events),
            asset_events=assets,
        )

    def _gather(self, items: list[InboxItem], deadline: float) -> None:
        """Everything that arrives until ``deadline`` (a Wake ends the wait)."""
        while (left := deadline - time.monotonic()) > 0:
            start = len(items)
            try:
                items.append(self._queue.get(timeout=left))
            except queue.Empty:
                return
            self._drain(items)
            if any(isinstance(i, Wake) for i in items[start:]):
                return

    def _drain(self, items: list[InboxItem]) -> None:
        while True:
            try:
                items.append(self._queue.get_nowait())
            except queue.Empty:
                return


def _coalesce_for(items: list[InboxItem]) -> float:
    """How long to wait for more before stepping, so one transaction takes more: a short
    task's "finished" follows its "started" within milliseconds; remote workers' results
    arrive one notice each."""
    if not items or any(isinstance(i, Wake) for i in items):
        return 0.0
    if all(isinstance(i, TaskStarted) for i in items):
        return START_COALESCE_SECONDS
    if all(isinstance(i, RunsChanged) for i in items):
        return RUNS_COALESCE_SECONDS
    return 0.0
