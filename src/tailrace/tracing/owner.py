"""Spans the owners of task-instance state write: the scheduler and, for remote workers'
reports, the api-server. A transition hook (ADR 0011) turns state changes into each try's
span and its queued and deferred segments; the scheduler adds runs, expansion passes and
the batches of trigger events it hands to consumers."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select

from tailrace.db.models import DagRun, TaskInstance, Trigger
from tailrace.state import TaskInstanceState as TIS
from tailrace.tracing import _setup
from tailrace.tracing._ids import run_span_id, run_trace_id, trigger_run_span_id, try_span_id
from tailrace.tracing._spans import record_span, traceparent, traceparent_of
from tailrace.tracing.timeline import Handed

__all__ = [
    "StateSpans",
    "install_state_spans",
    "record_events",
    "record_expansion",
    "record_run",
    "trace_of_run",
    "workload_traceparent",
]

# Remembered per process for a try's segments; an instance finished elsewhere (another
# scheduler, the api-server) is forgotten once this many are remembered.
REMEMBERED = 100_000
_FAILED = frozenset({TIS.FAILED, TIS.UP_FOR_RETRY, TIS.UPSTREAM_FAILED})
_CHUNK = 2000


class _Lru(OrderedDict[Any, Any]):
    def put(self, key: Any, value: Any) -> None:
        self[key] = value
        self.move_to_end(key)
        if len(self) > REMEMBERED:
            self.popitem(last=False)


_trace_of_run: _Lru = _Lru()


def trace_of_run(conn: Connection, dag_run_id: int) -> int:
    """The trace id of a run, from its row (remembered: a run's ids never change)."""
    known = _trace_of_run.get(dag_run_id)
    if known is None:
        row = conn.execute(
            select(DagRun.dag_id, DagRun.run_id).where(DagRun.id == dag_run_id)
        ).one()
        known = run_trace_id(row.dag_id, row.run_id, dag_run_id)
        _trace_of_run.put(dag_run_id, known)
    return int(known)


def _task_attributes(row: Any, try_number: int | None) -> dict[str, str | int]:
    attributes: dict[str, str | int] = {
        "tailrace.dag_id": row.dag_id,
        "tailrace.run_id": row.run_id,
        "tailrace.task_id": row.task_id,
        "tailrace.map_index": row.map_index,
    }
    if try_number is not None:
        attributes["tailrace.try_number"] = try_number
    return attributes


class StateSpans:
    """The transition hook: a span per try (from its first queue to its end), its
    "queued" waits (queued → running) and its "deferred" waits (deferred → resumed or
    ended), all children of the try's span, which is the run's child."""

    def __init__(self, component: str) -> None:
        self.component = component
        self._lock = threading.Lock()
        self._try_began: _Lru = _Lru()  # ti id -> when its current try was first queued
        self._queued: _Lru = _Lru()  # ti id -> when its current stint was queued
        self._deferred: _Lru = _Lru()  # ti id -> when it last deferred

    def __call__(self, conn: Connection, transitions: Sequence[Any]) -> None:
        wanted = [t for t in transitions if t.kind in _KINDS]
        if not wanted:
            return
        rows = _rows(conn, {t.ti_id for t in wanted if t.kind != "queue"})
        with self._lock:
            for t in wanted:
                _KINDS[t.kind](self, t, rows.get(t.ti_id))

    def _queue(self, t: Any, row: Any) -> None:
        if t.ti_id not in self._deferred:
            self._try_began.put(t.ti_id, t.at)  # a new try (a resumed one keeps its own)
        self._deferred.pop(t.ti_id, None)
        self._queued.put(t.ti_id, t.at)

    def _start(self, t: Any, row: Any) -> None:
        if row is None:
            return
        since = self._queued.pop(t.ti_id, None) or row.queued_at or t.at
        self._segment(row, t.try_number or row.try_number, "queued", since, t.at)

    def _defer(self, t: Any, row: Any) -> None:
        if row is not None and row.state == TIS.DEFERRED and t.ti_id not in self._try_began:
            # A try that begins in the triggerer (start_from_trigger) is first queued here.
            self._try_began.put(t.ti_id, t.at)
        self._deferred.put(t.ti_id, t.at)

    def _resume(self, t: Any, row: Any) -> None:
        if row is None:
            return
        since = self._deferred.get(t.ti_id) or row.trigger_created_at or t.at
        self._segment(row, row.try_number, "deferred", since, t.at)
        # Still the same try: _queue sees it is resuming.
        self._deferred.put(t.ti_id, t.at)

    def _finish(self, t: Any, row: Any) -> None:
        if row is None:
            return
        try_number = t.try_number or row.try_number
        deferred_since = self._deferred.pop(t.ti_id, None)
        if deferred_since is not None and row.trigger_id is not None:
            # Ended while deferred: by its trigger, or its deferral timed out.
            self._segment(row, try_number, "deferred", deferred_since, t.at)
        queued_since = self._queued.pop(t.ti_id, None)
        began = self._try_began.pop(t.ti_id, None) or _earliest(
            queued_since, row.queued_at, row.start_date, t.at
        )
        trace_id = run_trace_id(row.dag_id, row.run_id, row.dag_run_id)
        attributes = _task_attributes(row, try_number)
        attributes["tailrace.state"] = t.state or "none"
        record_span(
            self.component,
            f"task {row.task_id}",
            start=began,
            end=t.at,
            trace_id=trace_id,
            parent_span_id=run_span_id(trace_id),
            span_id=try_span_id(trace_id, t.ti_id, try_number),
            attributes=attributes,
            error=(t.error or t.state) if t.state in _FAILED or t.kind == "orphan" else None,
        )

    def _segment(
        self, row: Any, try_number: int, name: str, start: datetime, end: datetime
    ) -> None:
        trace_id = run_trace_id(row.dag_id, row.run_id, row.dag_run_id)
        record_span(
            self.component,
            name,
            start=start,
            end=end,
            trace_id=trace_id,
            parent_span_id=try_span_id(trace_id, row.id, try_number),
            attributes=_task_attributes(row, try_number),
        )


_KINDS: dict[str, Callable[[StateSpans, Any, Any], None]] = {
    "queue": StateSpans._queue,
    "start": StateSpans._start,
    "defer": StateSpans._defer,
    "resume": StateSpans._resume,
    "finish": StateSpans._finish,
    "orphan": StateSpans._finish,
}


def _earliest(*moments: datetime | None) -> datetime:
    return min(m for m in moments if m is not None)


def _rows(conn: Connection, ti_ids: set[int]) -> dict[int, Any]:
    found: dict[int, Any] = {}
    ids = sorted(ti_ids)
    for i in range(0, len(ids), _CHUNK):
        found.update(
            (r.id, r)
            for r in conn.execute(
                select(
                    TaskInstance.id,
                    TaskInstance.dag_run_id,
                    TaskInstance.dag_id,
                    TaskInstance.run_id,
                    TaskInstance.task_id,
                    TaskInstance.map_index,
                    TaskInstance.state,
                    TaskInstance.try_number,
                    TaskInstance.queued_at,
                    TaskInstance.start_date,
                    TaskInstance.trigger_id,
                    Trigger.created_at.label("trigger_created_at"),
                )
                .outerjoin(Trigger, Trigger.id == TaskInstance.trigger_id)
                .where(TaskInstance.id.in_(ids[i : i + _CHUNK]))
            )
        )
    return found


_installed: set[str] = set()
_install_lock = threading.Lock()


def install_state_spans(component: str) -> bool:
    """Register the transition hook once per process, if tracing is on."""
    from tailrace import transitions

    if not _setup.enabled():
        return False
    with _install_lock:
        if not _installed:
            transitions.register_hook(StateSpans(component))
            _installed.add(component)
    return True


def record_run(
    *, dag_run_id: int, dag_id: str, run_id: str, state: str, start: datetime | None, end: datetime
) -> None:
    """The run's span, the trace's root: written when the run finishes."""
    trace_id = run_trace_id(dag_id, run_id, dag_run_id)
    record_span(
        "scheduler",
        f"dag_run {dag_id}",
        start=start or end,
        end=end,
        trace_id=trace_id,
        parent_span_id=None,
        span_id=run_span_id(trace_id),
        attributes={"tailrace.dag_id": dag_id, "tailrace.run_id": run_id, "tailrace.state": state},
        error=state if state == "failed" else None,
    )


def record_expansion(
    *,
    dag_run_id: int,
    dag_id: str,
    run_id: str,
    task_id: str,
    kind: str,
    created: int,
    start: datetime,
    end: datetime,
) -> None:
    """One expansion pass: ``created`` mapped instances of ``task_id`` made at once."""
    trace_id = run_trace_id(dag_id, run_id, dag_run_id)
    record_span(
        "scheduler",
        f"expand {task_id}",
        start=start,
        end=end,
        trace_id=trace_id,
        parent_span_id=run_span_id(trace_id),
        attributes={
            "tailrace.dag_id": dag_id,
            "tailrace.run_id": run_id,
            "tailrace.task_id": task_id,
            "tailrace.expansion": kind,
            "tailrace.created": created,
        },
    )


def record_events(
    *, trace_id: int, ti_id: int, trigger_id: int, handed: Handed, consumer: str, now: datetime
) -> str:
    """A batch of trigger events handed to its consumer: a span from the first event's
    arrival to now, the trigger run's child (the hop back from the triggerer). Returns its
    ``traceparent`` for the workload that carries them."""
    span = record_span(
        "scheduler",
        "events",
        start=handed.arrived_at,
        end=now,
        trace_id=trace_id,
        parent_span_id=trigger_run_span_id(trace_id, handed.trigger_run_id),
        attributes={
            "tailrace.ti_id": ti_id,
            "tailrace.trigger_id": trigger_id,
            "tailrace.trigger_run_id": handed.trigger_run_id,
            "tailrace.consumer": consumer,
            "tailrace.first_sequence": handed.first,
            "tailrace.last_sequence": handed.last,
            "tailrace.events": handed.last - handed.first + 1,
        },
    )
    return traceparent_of(span)


def workload_traceparent(
    *,
    trace_id: int,
    ti_id: int,
    try_number: int,
    trigger_id: int | None,
    consumer: str,
    handed: Handed | None,
    now: datetime,
) -> str:
    """What a workload carries: the try's span, or the batch of events it resumes with."""
    if handed is None or trigger_id is None:
        return traceparent(trace_id, try_span_id(trace_id, ti_id, try_number))
    return record_events(
        trace_id=trace_id,
        ti_id=ti_id,
        trigger_id=trigger_id,
        handed=handed,
        consumer=consumer,
        now=now,
    )
