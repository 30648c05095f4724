"""Deferred task instances and their triggers, from the scheduler's side.

The triggerer owns trigger leases and writes trigger events; the scheduler reads those
events and decides what each means for its task instance: resume on a worker with the
event, or end the task right here (a trigger may end its task with no worker at all). It
also starts tasks that begin in the triggerer, and times out deferrals.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, insert, select, update

from tailrace.dagrun import cancel_triggers
from tailrace.db.models import TaskInstance, Trigger, TriggerEvent
from tailrace.execution import TaskFinished
from tailrace.execution._protocol import XComValue
from tailrace.scheduler._results import Applied, TaskLookup, apply_executor_events
from tailrace.serialization import SerializedStartTrigger, dumps, loads
from tailrace.state import TaskInstanceState as TIS

_PENDING_EVENTS = (
    select(
        TaskInstance.id,
        TaskInstance.dag_run_id,
        TaskInstance.try_number,
        TaskInstance.next_method,
        TaskInstance.next_kwargs,
        TriggerEvent.trigger_id,
        TriggerEvent.sequence_index,
        TriggerEvent.payload,
    )
    .join(Trigger, Trigger.id == TaskInstance.trigger_id)
    .join(TriggerEvent, TriggerEvent.trigger_id == Trigger.id)
    .where(
        TaskInstance.state == TIS.DEFERRED,
        TriggerEvent.sequence_index > Trigger.acked_sequence,
    )
    .order_by(TriggerEvent.trigger_id, TriggerEvent.sequence_index)
)


def _end_event(ti_id: int, try_number: int, payload: Any, now: datetime) -> TaskFinished | None:
    """A trigger's "the task is done" event, as the report a worker would have sent."""
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
        )
    return TaskFinished(
        ti_id=ti_id,
        try_number=try_number,
        outcome="failed",
        start_date=None,
        end_date=now,
        error=str(details.get("error") or "the trigger reported a failure"),
    )


def consume_trigger_events(
    conn: Connection,
    task_for: TaskLookup,
    now: datetime,
    trigger_ids: Collection[int] | None = None,
) -> Applied:
    """Hand each deferred instance the first event its trigger produced.

    ``trigger_ids`` narrows the look to triggers known to have new events (what a
    triggerer in this process reported); ``None`` looks at every deferred instance.
    """
    applied = Applied()
    finished: list[TaskFinished] = []
    seen: set[int] = set()
    query = _PENDING_EVENTS
    if trigger_ids is not None:
        if not trigger_ids:
            return applied
        query = query.where(TriggerEvent.trigger_id.in_(list(trigger_ids)))
    for row in conn.execute(query).all():
        if row.id in seen:
            continue  # one event resumes a classic deferral; later ones wait (streaming)
        seen.add(row.id)
        payload = loads(row.payload)
        conn.execute(
            update(Trigger)
            .where(Trigger.id == row.trigger_id)
            .values(acked_sequence=row.sequence_index)
        )
        applied.runs.add(row.dag_run_id)
        end = _end_event(row.id, row.try_number, payload, now)
        if end is None and row.next_method is None:
            # A task started from a trigger with nowhere to resume: the event is its result.
            end = TaskFinished(
                ti_id=row.id,
                try_number=row.try_number,
                outcome="success",
                start_date=None,
                end_date=now,
                xcoms=[XComValue("return_value", dumps(payload))] if payload is not None else [],
            )
        if end is not None:
            finished.append(end)
            continue
        conn.execute(
            update(TaskInstance)
            .where(TaskInstance.id == row.id, TaskInstance.state == TIS.DEFERRED)
            .values(
                state=TIS.SCHEDULED,
                next_kwargs={**(row.next_kwargs or {}), "event": payload},
                trigger_timeout=None,
                updated_at=now,
            )
        )
    if finished:
        applied.runs |= apply_executor_events(conn, finished, task_for, now).runs
    return applied


def expire_deferrals(conn: Connection, task_for: TaskLookup, now: datetime) -> Applied:
    """Fail deferred instances whose deadline passed, and cancel their triggers."""
    rows = conn.execute(
        select(
            TaskInstance.id,
            TaskInstance.try_number,
            TaskInstance.trigger_id,
            TaskInstance.trigger_timeout,
            Trigger.created_at,
        )
        .join(Trigger, Trigger.id == TaskInstance.trigger_id)
        .where(TaskInstance.state == TIS.DEFERRED, TaskInstance.trigger_timeout <= now)
    ).all()
    if not rows:
        return Applied()
    cancel_triggers(conn, [r.trigger_id for r in rows])
    events = [
        TaskFinished(
            ti_id=r.id,
            try_number=r.try_number,
            outcome="failed",
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
    conn: Connection, ti_id: int, start: SerializedStartTrigger, now: datetime
) -> None:
    """Begin a try in the triggerer: no worker is involved until (unless) it resumes."""
    trigger_id = conn.execute(
        insert(Trigger)
        .values(classpath=start.classpath, kwargs=start.kwargs, created_at=now)
        .returning(Trigger.id)
    ).scalar_one()
    conn.execute(
        update(TaskInstance)
        .where(TaskInstance.id == ti_id)
        .values(
            state=TIS.DEFERRED,
            try_number=TaskInstance.try_number + 1,
            queued_at=now,
            start_date=now,
            trigger_id=trigger_id,
            next_method=start.next_method,
            next_kwargs=start.next_kwargs,
            trigger_timeout=now + timedelta(seconds=start.timeout) if start.timeout else None,
            next_retry_at=None,
            updated_at=now,
        )
    )


def earliest_deferral_deadline(conn: Connection) -> datetime | None:
    deadline: datetime | None = conn.scalar(
        select(TaskInstance.trigger_timeout)
        .where(TaskInstance.state == TIS.DEFERRED, TaskInstance.trigger_timeout.is_not(None))
        .order_by(TaskInstance.trigger_timeout)
        .limit(1)
    )
    return deadline
