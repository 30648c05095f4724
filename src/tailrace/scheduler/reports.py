"""Apply what workers reported, in the scheduler's transaction: state, XComs, skips, tries."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Row, bindparam, delete, insert, select, update

from tailrace import metrics, transitions
from tailrace.db.models import DagRun, TaskInstance, Trigger, XCom
from tailrace.execution import DagCallbackFinished, TaskFinished, TaskStarted
from tailrace.execution.protocol import StreamItems
from tailrace.scheduler._planner import retry_delay_seconds
from tailrace.sdk.execution import CALLBACK_OF_STATE
from tailrace.serialization import SerializedTask
from tailrace.state import TaskInstanceState as TIS
from tailrace.state import state_after_try
from tailrace.store import dead_letters
from tailrace.store.assets import NewAssetEvent
from tailrace.store.rendered import Rendering
from tailrace.store.rendered import record as record_renderings
from tailrace.store.triggers import complete_triggers, create_trigger
from tailrace.streams import append_items, close_stream, open_stream, reset_streams

TaskLookup = Callable[[Connection, int, str], SerializedTask]
log = logging.getLogger(__name__)


_FINISHED_ROWS = (
    select(
        TaskInstance.id,
        TaskInstance.dag_run_id,
        TaskInstance.dag_id,
        TaskInstance.run_id,
        TaskInstance.task_id,
        TaskInstance.map_index,
        TaskInstance.state,
        TaskInstance.try_number,
        TaskInstance.max_tries,
        TaskInstance.start_date,
        TaskInstance.next_method,
        TaskInstance.trigger_id,
        DagRun.dag_version_id,
    )
    .join(DagRun, DagRun.id == TaskInstance.dag_run_id)
    .where(TaskInstance.id.in_(bindparam("ids", expanding=True)))
    # Two components finishing the same try (an orphaned one, say) take turns; the second
    # then sees it finished and leaves it. In id order, so they cannot deadlock.
    .order_by(TaskInstance.id)
    .with_for_update(of=TaskInstance, key_share=True)
)
_DELETE_XCOM = delete(XCom).where(
    XCom.dag_run_id == bindparam("b_run"),
    XCom.task_id == bindparam("b_task"),
    XCom.map_index == bindparam("b_map"),
    XCom.key == bindparam("b_key"),
)


def start_try(
    conn: Connection, event: TaskStarted, *, heartbeat: datetime | None = None
) -> Row[str, str, str, int] | None:
    """Mark one queued try running (``heartbeat``: and its worker heard of then): its
    instance's identity, or None if it is not the instance's queued try."""
    return transitions.start_one(conn, event, heartbeat=heartbeat)


@dataclass
class Applied:
    """What applying a batch of reports changed, for the scheduler to follow up on."""

    runs: set[int] = field(default_factory=set)
    # Triggers were created or cancelled: the triggerer should look.
    triggers_changed: bool = False
    # Triggers whose consumers acknowledged events: a paused (backpressured) one may go on.
    acked_triggers: set[int] = field(default_factory=set)
    # Triggers whose events wait because iterate tasks downstream have not caught up.
    held_triggers: set[int] = field(default_factory=set)
    # Running triggers whose acknowledged events went as they were acknowledged (a
    # direct stream's copied events): no prune of their own is due, and how many went.
    pruned_triggers: set[int] = field(default_factory=set)
    pruned_events: int = 0
    # (ti id, try number) of each report that applied: its try was current.
    reports: set[tuple[int, int]] = field(default_factory=set)
    # Asset events written (tasks with outlets succeeded): DAGs may be due to run.
    asset_events: int = 0
    # Task callbacks recorded for tries that ended without a worker: to hand to one.
    callbacks: int = 0


def _defer(
    conn: Connection, row: Any, event: TaskFinished, task: SerializedTask, now: datetime
) -> None:
    deferral = event.deferral
    assert deferral is not None
    trigger_id = create_trigger(
        conn,
        classpath=deferral.classpath,
        kwargs=deferral.kwargs,
        consumer=deferral.consumer,
        max_pending_events=task.max_pending_events,
        timeout_outcome=deferral.timeout_outcome,
        now=now,
        traceparent=deferral.traceparent,
    )
    timeout = now + timedelta(seconds=deferral.timeout) if deferral.timeout else None
    if deferral.consumer == "batch":
        open_stream(conn, row.id, now)
    transitions.defer(
        conn,
        row.id,
        row.try_number,
        trigger_id=trigger_id,
        next_method=deferral.method_name,
        next_kwargs=deferral.next_kwargs,
        trigger_timeout=timeout,
        start_date=event.start_date,
        now=now,
    )


def _xcom_rows(
    row: Any, event: TaskFinished, now: datetime, replaced: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    rows = [
        {
            "dag_run_id": row.dag_run_id,
            "task_id": row.task_id,
            "map_index": row.map_index,
            "key": x.key,
            "value": x.value,
            "length": x.length,
            "created_at": now,
        }
        for x in event.xcoms
    ]
    if row.next_method is not None or event.outcome == "deferred":
        # One try spans its deferrals: a key pushed again replaces the earlier value.
        replaced.extend(
            {
                "b_run": x["dag_run_id"],
                "b_task": x["task_id"],
                "b_map": x["map_index"],
                "b_key": x["key"],
            }
            for x in rows
        )
    return rows


def _record_stream_output(
    conn: Connection, row: Any, event: TaskFinished, now: datetime, applied: Applied
) -> None:
    """Stream items and the acknowledgement of the events that produced them, together."""
    if event.stream_items:
        append_items(conn, row.id, event.stream_items, now)
    if event.acked_sequence is not None and row.trigger_id is not None:
        if metrics.get().enabled:
            before = conn.scalar(select(Trigger.acked_sequence).where(Trigger.id == row.trigger_id))
            metrics.stream_acknowledged(
                conn, row.trigger_id, -1 if before is None else before, event.acked_sequence
            )
        conn.execute(
            update(Trigger)
            .where(Trigger.id == row.trigger_id)
            .values(acked_sequence=event.acked_sequence)
        )
        applied.acked_triggers.add(row.trigger_id)
    streaming = event.streamed or event.stream_items or event.acked_sequence is not None
    if event.outcome == "success" and streaming:
        close_stream(conn, row.id, now)


def _resumes_stream(row: Any, task: SerializedTask, state: str, *, running: bool) -> bool:
    """A failed try consuming a stream whose retry picks up after the last ack."""
    return (
        state == TIS.UP_FOR_RETRY
        and task.stream_retry in ("resume", "dead_letter")
        and row.trigger_id is not None
        and row.next_method is not None
        # The consumer failed on a worker; a trigger that failed has nothing to resume.
        and running
    )


def _dead_letters(row: Any, task: SerializedTask, event: TaskFinished, *, running: bool) -> bool:
    """A try that failed handling trigger events, of a task whose batches that fail every
    try go to the dead letters (``stream_retry="dead_letter"``)."""
    return (
        task.stream_retry == "dead_letter"
        and event.outcome == "failed"
        and event.failed_events is not None
        and row.trigger_id is not None
        and row.next_method is not None
        and running
    )


def _dead_letter_batch(
    conn: Connection,
    row: Any,
    task: SerializedTask,
    event: TaskFinished,
    now: datetime,
    applied: Applied,
) -> int:
    """The last try failed too: its batch goes to the dead letters, acknowledged, and the
    next batch is handled with the task's retries afresh (the new max_tries returned)."""
    assert event.failed_events is not None
    first, last = event.failed_events
    recorded = dead_letters.record_batch(
        conn,
        ti=row,
        trigger_id=row.trigger_id,
        first=first,
        last=last,
        try_number=row.try_number,
        reason=event.error or "the handler failed",
        now=now,
    )
    count = 0
    if recorded is not None:
        count, before = recorded
        metrics.stream_acknowledged(conn, row.trigger_id, before, last)
    reason = (event.error or "").strip().splitlines() or ["no error was reported"]
    log.warning(
        "Trigger events #%d-#%d (%d) of %s.%s, run %s, failed every try and went to the "
        "dead letters: %s",
        first,
        last,
        count,
        row.dag_id,
        row.task_id,
        row.run_id,
        reason[-1],
    )
    applied.acked_triggers.add(row.trigger_id)
    return int(row.try_number) + task.retries


def _starts_with_end(
    events: Sequence[TaskStarted | StreamItems | TaskFinished | DagCallbackFinished],
) -> dict[tuple[int, int], TaskStarted]:
    """Starts whose try's end is in the same batch (a short task's usually are): `finish`
    writes them with the end, one UPDATE instead of two. Not a try that defers or handles
    events (it goes on running, deferred) nor one that streamed items (they are taken
    from running tries only)."""
    ends = {
        (e.ti_id, e.try_number)
        for e in events
        if isinstance(e, TaskFinished) and e.outcome not in ("deferred", "handled")
    }
    if not ends:
        return {}
    streaming = {e.ti_id for e in events if isinstance(e, StreamItems)}
    return {
        (e.ti_id, e.try_number): e
        for e in events
        if isinstance(e, TaskStarted)
        and (e.ti_id, e.try_number) in ends
        and e.ti_id not in streaming
    }


def _still_deferred(
    conn: Connection,
    row: Any,
    event: TaskFinished,
    task: SerializedTask,
    now: datetime,
    applied: Applied,
    *,
    keep_trigger: bool = False,
) -> bool:
    """Deferral bookkeeping; True when the try goes on waiting for trigger events."""
    if event.outcome == "deferred":
        _defer(conn, row, event, task, now)
        applied.triggers_changed = True
        return True
    if event.outcome == "handled":
        transitions.handled(conn, row.id, row.try_number, now)
        # Events stored while it handled the batch woke nobody (the instance was busy):
        # its trigger is looked at in this step, not at the next full scan.
        applied.held_triggers.add(row.trigger_id)
        return True
    if (
        row.trigger_id is not None
        and not keep_trigger
        and complete_triggers(conn, [row.trigger_id])
    ):
        # The task is done with its trigger (failed mid-stream, say): no later event of
        # this run is accepted, and the triggerer stops it.
        applied.triggers_changed = True
    return False


def _asset_events(row: Any, task: SerializedTask, event: TaskFinished) -> list[NewAssetEvent]:
    """The events a success emits: one per asset outlet (with the extra the task set),
    and one per asset the task added through each alias outlet."""
    source = {
        "source_dag_id": row.dag_id,
        "source_task_id": row.task_id,
        "source_run_id": row.run_id,
        "source_map_index": row.map_index,
    }
    out = []
    for outlet in task.outlets:
        if outlet.kind == "asset":
            extra = next(
                (r.extra for r in event.asset_events if r.alias is None and r.name == outlet.name),
                {},
            )
            out.append(NewAssetEvent(name=outlet.name or "", uri=outlet.uri, extra=extra, **source))
        elif outlet.kind == "alias":
            out.extend(
                NewAssetEvent(
                    name=r.name,
                    uri=r.uri,
                    group=r.group,
                    extra=r.extra,
                    source_alias_name=outlet.name,
                    **source,
                )
                for r in event.asset_events
                if r.alias == outlet.name
            )
    return out


def _next_retry(task: SerializedTask, try_number: int, now: datetime) -> datetime:
    delay = retry_delay_seconds(
        task.retry_delay, try_number, task.retry_exponential_backoff, task.max_retry_delay
    )
    return now + timedelta(seconds=delay)


def _append_streamed(
    conn: Connection, events: Sequence[StreamItems], now: datetime, applied: Applied
) -> None:
    """Items a running task yielded: into its output stream, unless the try is stale."""
    rows = {
        r.id: r
        for r in conn.execute(
            select(TaskInstance.id, TaskInstance.dag_run_id, TaskInstance.try_number).where(
                TaskInstance.id.in_({e.ti_id for e in events}),
                TaskInstance.state == TIS.RUNNING,
            )
        )
    }
    items: dict[int, list[str]] = defaultdict(list)  # in arrival order, per instance
    first: dict[int, int | None] = {}
    for event in events:
        row = rows.get(event.ti_id)
        if row is None or row.try_number != event.try_number:
            continue
        applied.runs.add(row.dag_run_id)
        applied.reports.add((row.id, event.try_number))
        start = first.setdefault(row.id, event.first_index)
        gathered = items[row.id]
        if start is not None and event.first_index is not None:
            # The same items sent again (a remote worker's answer was lost) overlap what
            # this batch already gathered: keep only what comes after.
            gathered.extend(event.items[max(0, start + len(gathered) - event.first_index) :])
        else:
            gathered.extend(event.items)
    for ti_id, values in items.items():
        append_items(conn, ti_id, values, now, at=first[ti_id])


def apply_executor_events(
    conn: Connection,
    events: Sequence[TaskStarted | StreamItems | TaskFinished | DagCallbackFinished],
    task_for: TaskLookup,
    now: datetime,
    *,
    retry_now: Collection[int] = (),
) -> Applied:
    """Write the events: one transaction for the states, XComs, skips and tries (a DAG
    callback's end is the caller's). A failed try of an instance in ``retry_now`` (lost
    with its worker) is retried without delay."""
    applied = Applied()
    with_end = _starts_with_end(events)
    transitions.start(
        conn,
        [
            e
            for e in events
            if isinstance(e, TaskStarted) and (e.ti_id, e.try_number) not in with_end
        ],
    )
    streamed = [e for e in events if isinstance(e, StreamItems)]
    if streamed:
        _append_streamed(conn, streamed, now, applied)
    # By instance: a stale try's report may arrive beside the current try's.
    finished: dict[int, list[TaskFinished]] = defaultdict(list)
    for e in events:
        if isinstance(e, TaskFinished):
            finished[e.ti_id].append(e)
    if not finished:
        return applied
    rows = conn.execute(_FINISHED_ROWS, {"ids": list(finished)}).all()
    outcomes: list[transitions.Outcome] = []
    xcoms: list[dict[str, Any]] = []
    replaced: list[dict[str, Any]] = []
    skips: list[tuple[int, str]] = []
    rendered: list[Rendering] = []
    for row in rows:
        # A result from an older try (the instance was cleared meanwhile) is stale.
        event = next((e for e in finished[row.id] if e.try_number == row.try_number), None)
        if event is None or row.state not in transitions.ACCEPTING_REPORTS:
            continue
        applied.runs.add(row.dag_run_id)
        applied.reports.add((row.id, row.try_number))
        xcoms.extend(_xcom_rows(row, event, now, replaced))
        rendered.extend(_rendered_rows(row, event, now))
        task = task_for(conn, row.dag_version_id, row.task_id)
        _record_stream_output(conn, row, event, now, applied)
        # Its start, written with its end: what `start` would have done to a queued try.
        started = with_end.get((row.id, row.try_number)) if row.state == TIS.QUEUED else None
        running = row.state == TIS.RUNNING or started is not None
        dead_lettering = _dead_letters(row, task, event, running=running)
        state = state_after_try(
            event.outcome, row.try_number, row.max_tries, dead_letters=dead_lettering
        )
        resume = _resumes_stream(row, task, state, running=running)
        if _still_deferred(conn, row, event, task, now, applied, keep_trigger=resume):
            continue
        retries_back = None
        if dead_lettering and row.try_number > row.max_tries:
            retries_back = _dead_letter_batch(conn, row, task, event, now, applied)
        if state == TIS.UP_FOR_RETRY and not resume:
            # A retry starts afresh (a new trigger run, a new generator): so does its
            # stream (ADR 0005).
            reset_streams(conn, [row.id])
        outcomes.append(
            _outcome(row, task, event, state, started, resume, retries_back, retry_now, now)
        )
        skips.extend((row.dag_run_id, t) for t in event.skip_task_ids)
    applied.asset_events += transitions.finish(conn, outcomes)
    applied.callbacks += sum(1 for o in outcomes if o.callback is not None)
    if replaced:
        conn.execute(_DELETE_XCOM, replaced)
    if xcoms:
        conn.execute(insert(XCom), xcoms)
    record_renderings(conn, rendered)
    transitions.skip_unrun(conn, skips, now)
    return applied


def _outcome(
    row: Any,
    task: SerializedTask,
    event: TaskFinished,
    state: str,
    started: TaskStarted | None,
    resume: bool,
    retries_back: int | None,
    retry_now: Collection[int],
    now: datetime,
) -> transitions.Outcome:
    """How the try ended, for `transitions.finish`."""
    start = (
        row.start_date
        or (started.start_date if started is not None else None)
        or event.start_date
        or event.end_date
    )
    next_retry = None
    if state == TIS.UP_FOR_RETRY:
        immediate = row.id in retry_now or retries_back is not None
        next_retry = now if immediate else _next_retry(task, row.try_number, now)
    return transitions.Outcome(
        ti_id=row.id,
        try_number=row.try_number,
        state=state,
        start_date=start,
        end_date=event.end_date,
        error=event.error,
        next_retry_at=next_retry,
        rendered_map_index=event.rendered_map_index,
        keep_deferral=resume,
        asset_events=tuple(_asset_events(row, task, event))
        if state == TIS.SUCCESS and task.outlets
        else (),
        dag_id=row.dag_id,
        task_id=row.task_id,
        callback=None if event.callbacks_run else _callback_to_run(task, state),
        dag_run_id=row.dag_run_id,
        started=started,
        max_tries=retries_back,
    )


def _callback_to_run(task: SerializedTask, state: str) -> str | None:
    """The kind of ``task``'s callback a try ending in ``state`` calls, if it has one."""
    name = CALLBACK_OF_STATE.get(state)
    if name is None or name not in task.callbacks:
        return None
    return name.removeprefix("on_").removesuffix("_callback")


def _rendered_rows(row: Any, event: TaskFinished, now: datetime) -> list[Rendering]:
    if not event.rendered_fields:
        return []
    return [Rendering(row.id, row.try_number, event.rendered_fields, now)]
