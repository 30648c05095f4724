"""Deferred task instances and their triggers, from the scheduler's side.

The triggerer owns trigger leases and writes trigger events; the scheduler reads those
events and decides what each means for its task instance: resume on a worker with the
event, or end the task right here (a trigger may end its task with no worker at all). It
also starts tasks that begin in the triggerer, and times out deferrals.
"""

from __future__ import annotations

import functools
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, func, or_, select

from tailrace import metrics, tracing, transitions
from tailrace.db import is_postgres
from tailrace.db.models import DagRun, TaskInstance, Trigger, TriggerEvent
from tailrace.execution import TaskFinished
from tailrace.execution.protocol import EventEnvelope, Outcome, XComValue
from tailrace.scheduler._iterate import downstream_room
from tailrace.scheduler.reports import Applied, TaskLookup, apply_executor_events
from tailrace.serialization import SerializedTask, dumps, loads
from tailrace.state import TaskInstanceState as TIS
from tailrace.store.triggers import acknowledge_consumed, complete_triggers, create_trigger
from tailrace.streams import copy_events_to_stream, open_stream, read_items
from tailrace.tracing.owner import record_events, trace_of_run
from tailrace.tracing.timeline import events_handed

# Deferred instances whose trigger has unacknowledged events, or has completed.
_WAITING = (
    select(
        TaskInstance.id,
        TaskInstance.dag_run_id,
        TaskInstance.try_number,
        TaskInstance.next_method,
        TaskInstance.task_id,
        TaskInstance.trigger_id,
        DagRun.dag_version_id,
        Trigger.consumer,
        Trigger.completed,
        Trigger.acked_sequence,
        Trigger.next_sequence,
        Trigger.pruned_sequence,
    )
    .join(Trigger, Trigger.id == TaskInstance.trigger_id)
    .join(DagRun, DagRun.id == TaskInstance.dag_run_id)
    .where(
        TaskInstance.state == TIS.DEFERRED,
        or_(Trigger.next_sequence > Trigger.acked_sequence + 1, Trigger.completed.is_(True)),
    )
)
# Instances away from their trigger (resuming, or handling events on a worker) whose
# trigger has news meanwhile: nobody may act on it until the instance is deferred again.
_BUSY_WITH_NEWS = (
    select(TaskInstance.trigger_id)
    .join(Trigger, Trigger.id == TaskInstance.trigger_id)
    .where(
        TaskInstance.state.in_([TIS.SCHEDULED, TIS.QUEUED, TIS.RUNNING]),
        or_(Trigger.next_sequence > Trigger.acked_sequence + 1, Trigger.completed.is_(True)),
    )
)
_TASK_END_MARK = '"__task_end__"'


def pending_events(
    conn: Connection, trigger_id: int, after: int, limit: int
) -> list[EventEnvelope]:
    """Events of a trigger past its acknowledgement, in order."""
    return [
        EventEnvelope(*row)
        for row in conn.execute(
            select(
                TriggerEvent.trigger_run_id,
                TriggerEvent.sequence_index,
                TriggerEvent.payload,
                TriggerEvent.is_last,
            )
            .where(TriggerEvent.trigger_id == trigger_id, TriggerEvent.sequence_index > after)
            .order_by(TriggerEvent.sequence_index)
            .limit(limit)
        )
    ]


def _end_event(
    ti_id: int, try_number: int, payload: Any, now: datetime, sequence_index: int | None = None
) -> TaskFinished | None:
    """A trigger's "the task is done" event, as the report a worker would have sent
    (acknowledging the event, when it has a sequence index)."""
    from tailrace.sdk.triggers import task_end_of

    end = task_end_of(payload)
    if end is None:
        return None
    outcome, details = end
    if outcome == "success":
        xcoms = [
            XComValue(key, dumps(value), len(value) if isinstance(value, list | dict) else None)
            for key, value in (details.get("xcoms") or {}).items()
        ]
        return TaskFinished(
            ti_id=ti_id,
            try_number=try_number,
            outcome="success",
            start_date=None,
            end_date=now,
            xcoms=xcoms,
            acked_sequence=sequence_index,
        )
    return TaskFinished(
        ti_id=ti_id,
        try_number=try_number,
        outcome="failed",
        start_date=None,
        end_date=now,
        error=str(details.get("error") or "the trigger reported a failure"),
        acked_sequence=sequence_index,
    )


@dataclass
class _Consumption:
    applied: Applied = field(default_factory=Applied)
    finished: list[TaskFinished] = field(default_factory=list)
    # When a partial batch waiting for more events is due anyway (max_batch_latency).
    next_deadline: datetime | None = None


def consume_trigger_events(
    conn: Connection,
    task_for: TaskLookup,
    now: datetime,
    trigger_ids: Collection[int] | None = None,
) -> tuple[Applied, datetime | None]:
    """Decide, for each deferred instance with news from its trigger, what happens now.

    - an event that ends the task (TaskSuccessEvent/TaskFailedEvent): the task ends here;
    - "classic" consumers resume on a worker with the next event, one at a time, in order;
    - "batch" consumers resume with up to ``max_batch_size`` events, once that many are
      pending, the trigger completed, or the oldest waited ``max_batch_latency``;
    - "direct" consumers (no worker at all): payloads go straight into the output stream;
    - a completed trigger whose events are all acknowledged ends its task successfully.

    ``trigger_ids`` narrows the look to triggers known to have news. Triggers with news whose
    instance is not deferred (it is handling earlier events) are held: looked at again when
    instances finish. Returns what changed and when a partial batch falls due.
    """
    state = _Consumption()
    query, busy = _WAITING, _BUSY_WITH_NEWS
    if trigger_ids is not None:
        if not trigger_ids:
            return state.applied, None
        query = query.where(TaskInstance.trigger_id.in_(list(trigger_ids)))
        busy = busy.where(TaskInstance.trigger_id.in_(list(trigger_ids)))
    # The news of a trigger whose instance is on a worker would be lost with this look
    # (the wake-up that brought it is used up): look again when instances finish, which
    # is when that one comes back to deferred.
    state.applied.held_triggers.update(conn.scalars(busy))
    for seen in conn.execute(query).all():
        if not _lock_trigger(conn, seen.trigger_id):
            # The triggerer (or another scheduler) holds this trigger: look again when its
            # commit wakes us (or when tasks finish), rather than wait for it in this step.
            state.applied.held_triggers.add(seen.trigger_id)
            continue
        row = _still_waiting(conn, seen)
        if row is None:
            continue  # another scheduler consumed it between our read and our lock
        state.applied.runs.add(row.dag_run_id)
        task = task_for(conn, row.dag_version_id, row.task_id)
        room = downstream_room(
            conn, row.dag_run_id, task, functools.partial(task_for, conn, row.dag_version_id)
        )
        if row.consumer == "direct":
            _consume_direct(conn, row, now, state, room)
        elif room is not None and room <= 0 and not _ends_task(conn, row):
            state.applied.held_triggers.add(row.trigger_id)
        elif row.next_sequence - 1 > row.acked_sequence:
            _resume_or_end(conn, row, task, now, state)
        elif row.completed:
            state.finished.append(_success(row, now))
    if state.finished:
        state.applied.runs |= apply_executor_events(conn, state.finished, task_for, now).runs
    return state.applied, state.next_deadline


def _lock_trigger(conn: Connection, trigger_id: int) -> bool:
    """Lock the trigger row for this step's acknowledgement, unless the triggerer holds it
    (PostgreSQL's ``SKIP LOCKED``; SQLite has one writer, so no query is needed)."""
    if not is_postgres(conn):
        return True
    locked = conn.execute(
        select(Trigger.id).where(Trigger.id == trigger_id).with_for_update(skip_locked=True)
    ).first()
    return locked is not None


def _still_waiting(conn: Connection, seen: Any) -> Any:
    """The row as it is now that its trigger is locked: what another scheduler committed
    meanwhile (events acknowledged, the task resumed) must not be consumed again."""
    if not is_postgres(conn):
        return seen  # one writer: nothing changed since the read
    return conn.execute(_WAITING.where(TaskInstance.id == seen.id)).first()


def _ends_task(conn: Connection, row: Any) -> bool:
    """The next pending event ends the task (so backpressure must not hold it)."""
    payload = conn.scalar(
        select(TriggerEvent.payload).where(
            TriggerEvent.trigger_id == row.trigger_id,
            TriggerEvent.sequence_index == row.acked_sequence + 1,
        )
    )
    return payload is not None and _TASK_END_MARK in payload


def _success(row: Any, now: datetime, xcoms: list[XComValue] | None = None) -> TaskFinished:
    return TaskFinished(
        ti_id=row.id,
        try_number=row.try_number,
        outcome="success",
        start_date=None,
        end_date=now,
        xcoms=xcoms or [],
        acked_sequence=row.next_sequence - 1 if row.next_sequence else None,
    )


def _resume_or_end(
    conn: Connection, row: Any, task: SerializedTask, now: datetime, state: _Consumption
) -> None:
    batch = row.consumer == "batch"
    events = pending_events(
        conn, row.trigger_id, row.acked_sequence, task.max_batch_size if batch else 1
    )
    if not events:
        return
    first = events[0]
    if _TASK_END_MARK in first.payload:
        end = _end_event(row.id, row.try_number, loads(first.payload), now, first.sequence_index)
        if end is not None:
            state.finished.append(end)
            return
    partial = len(events) < task.max_batch_size and not any(e.is_last for e in events)
    if batch and partial and not row.completed:
        oldest = conn.scalar(
            select(TriggerEvent.created_at).where(
                TriggerEvent.trigger_id == row.trigger_id,
                TriggerEvent.sequence_index == first.sequence_index,
            )
        )
        due = oldest + timedelta(seconds=task.max_batch_latency) if oldest else now
        if due > now:  # a partial batch may still fill up: wait, but not past `due`
            if state.next_deadline is None or due < state.next_deadline:
                state.next_deadline = due
            return
    transitions.resume(conn, row.id, now)


def _consume_direct(
    conn: Connection, row: Any, now: datetime, state: _Consumption, room: int | None
) -> None:
    """A task with no resume method: its trigger's payloads are its output stream.

    Copied inside the database (``INSERT … SELECT``): no payload passes through Python,
    unless one of them ends the task. At most ``room`` more items when iterate tasks
    consume the stream (their backpressure).
    """
    upto = row.next_sequence - 1
    pending = (
        TriggerEvent.trigger_id == row.trigger_id,
        TriggerEvent.sequence_index > row.acked_sequence,
        TriggerEvent.sequence_index <= upto,
    )
    end_at = conn.scalar(
        select(func.min(TriggerEvent.sequence_index)).where(
            *pending, TriggerEvent.payload.contains(_TASK_END_MARK)
        )
    )
    if end_at is not None:
        upto = end_at - 1
    if room is not None and upto > row.acked_sequence + room:
        # Downstream holds the stream: the rest (and the end) waits in the trigger's buffer.
        upto, end_at = row.acked_sequence + max(room, 0), None
        state.applied.held_triggers.add(row.trigger_id)
    if upto > row.acked_sequence:
        handed = events_handed(
            conn,
            ti_id=row.id,
            trigger_id=row.trigger_id,
            first=row.acked_sequence + 1,
            last=upto,
            consumer="direct",
            now=now,
        )
        if tracing.enabled():
            record_events(
                trace_id=trace_of_run(conn, row.dag_run_id),
                ti_id=row.id,
                trigger_id=row.trigger_id,
                handed=handed,
                consumer="direct",
                now=now,
            )
        copy_events_to_stream(conn, row.id, row.trigger_id, row.acked_sequence, upto, now)
        # As for every consumer, a deferral timeout bounds the wait for the first event.
        transitions.first_event_arrived(conn, row.id)
        # Counted first: it reads the oldest event's age, which the acknowledgement
        # may delete.
        metrics.stream_acknowledged(conn, row.trigger_id, row.acked_sequence, upto)
        # Copied, so consumed: the events go now, while their pages are at hand, not in
        # a transaction of their own that waits for the write lock again.
        pruned = acknowledge_consumed(
            conn, row.trigger_id, row.acked_sequence, upto, pruned=row.pruned_sequence
        )
        state.applied.acked_triggers.add(row.trigger_id)
        state.applied.pruned_events += pruned
        if pruned and not row.completed:  # a completed one's unread rest: the prune's
            state.applied.pruned_triggers.add(row.trigger_id)
    if end_at is not None:
        payload = conn.scalar(
            select(TriggerEvent.payload).where(
                TriggerEvent.trigger_id == row.trigger_id, TriggerEvent.sequence_index == end_at
            )
        )
        end = _end_event(row.id, row.try_number, loads(payload or "null"), now, end_at)
        if end is not None:
            state.finished.append(end)
            return
    if row.completed and upto == row.next_sequence - 1:
        xcoms = []
        if row.next_sequence == 1:
            # One event is the shortest stream: its payload is also the task's result.
            # Read from the stream: the event itself may be pruned already.
            only = read_items(conn, row.id, 0, 1)
            xcoms = [XComValue("return_value", only[0])] if only else []
        state.finished.append(_success(row, now, xcoms))


_TIMEOUT_OUTCOMES: dict[str, Outcome] = {
    "failed": "failed",
    "failed_no_retry": "failed_no_retry",
    "skipped": "skipped",
}


def expire_deferrals(conn: Connection, task_for: TaskLookup, now: datetime) -> Applied:
    """Fail deferred instances whose deadline passed, and cancel their triggers."""
    rows = conn.execute(
        select(
            TaskInstance.id,
            TaskInstance.try_number,
            TaskInstance.trigger_id,
            TaskInstance.trigger_timeout,
            Trigger.created_at,
            Trigger.timeout_outcome,
        )
        .join(Trigger, Trigger.id == TaskInstance.trigger_id)
        .where(TaskInstance.state == TIS.DEFERRED, TaskInstance.trigger_timeout <= now)
    ).all()
    if not rows:
        return Applied()
    complete_triggers(conn, [r.trigger_id for r in rows])
    events = [
        TaskFinished(
            ti_id=r.id,
            try_number=r.try_number,
            outcome=_TIMEOUT_OUTCOMES.get(r.timeout_outcome, "failed"),
            start_date=None,
            end_date=now,
            error=(
                f"the deferral timed out: its trigger had not fired "
                f"{(r.trigger_timeout - r.created_at).total_seconds():g}s after the task "
                "deferred (raise the defer timeout if the wait is expected to be longer)"
            ),
        )
        for r in rows
    ]
    applied = apply_executor_events(conn, events, task_for, now)
    applied.triggers_changed = True
    return applied


def start_from_trigger(
    conn: Connection,
    ti_id: int,
    task: SerializedTask,
    now: datetime,
    traceparent: str | None = None,
) -> None:
    """Begin a try in the triggerer: no worker is involved until (unless) it resumes."""
    start = task.start_trigger
    assert start is not None
    consumer = (
        "batch"
        if task.handles_events and start.next_method in (None, "handle_trigger_events")
        else ("classic" if start.next_method else "direct")
    )
    trigger_id = create_trigger(
        conn,
        classpath=start.classpath,
        kwargs=start.kwargs,
        consumer=consumer,
        max_pending_events=task.max_pending_events,
        now=now,
        traceparent=traceparent,
    )
    next_method = "handle_trigger_events" if consumer == "batch" else start.next_method
    if consumer != "classic":
        open_stream(conn, ti_id, now)
    transitions.start_from_trigger(
        conn,
        ti_id,
        trigger_id=trigger_id,
        next_method=next_method,
        next_kwargs=start.next_kwargs,
        trigger_timeout=now + timedelta(seconds=start.timeout) if start.timeout else None,
        now=now,
    )


# When the first deferral times out (a scalar subquery of the scheduler's timer query).
EARLIEST_DEFERRAL_DEADLINE = (
    select(TaskInstance.trigger_timeout)
    .where(TaskInstance.state == TIS.DEFERRED, TaskInstance.trigger_timeout.is_not(None))
    .order_by(TaskInstance.trigger_timeout)
    .limit(1)
    .scalar_subquery()
)
