"""Task output streams: items stored one row each, appended in order, read lazily."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    delete,
    func,
    insert,
    literal,
    select,
    true,
    update,
)

from tailrace.db.models import (
    Dag,
    DagRun,
    Stream,
    StreamItem,
    TaskInstance,
    Trigger,
    TriggerEvent,
)
from tailrace.state import DagRunState
from tailrace.store import dead_letters

RETURN_VALUE = "return_value"


def _stream_id(conn: Connection, ti_id: int, now: datetime) -> tuple[int, int]:
    row = conn.execute(
        select(Stream.id, Stream.length).where(
            Stream.task_instance_id == ti_id, Stream.key == RETURN_VALUE
        )
    ).first()
    if row is not None:
        return row.id, row.length
    stream_id: int = conn.execute(
        insert(Stream)
        .values(task_instance_id=ti_id, key=RETURN_VALUE, created_at=now)
        .returning(Stream.id)
    ).scalar_one()
    return stream_id, 0


def open_stream(conn: Connection, ti_id: int, now: datetime) -> None:
    """Give a streaming try its (empty) output stream: an empty stream is still a stream."""
    _stream_id(conn, ti_id, now)


def append_items(
    conn: Connection, ti_id: int, items: Sequence[str], now: datetime, *, at: int | None = None
) -> None:
    """Append JSON-text items to the task instance's output stream. ``at``: the index of
    the first item, when the sender knows it; items already stored are not stored again."""
    stream_id, length = _stream_id(conn, ti_id, now)
    if at is not None and at < length:
        items = items[length - at :]
    if items:
        conn.execute(
            insert(StreamItem),
            [
                {"stream_id": stream_id, "index": length + i, "value": value}
                for i, value in enumerate(items)
            ],
        )
        conn.execute(
            update(Stream).where(Stream.id == stream_id).values(length=length + len(items))
        )


def copy_events_to_stream(
    conn: Connection, ti_id: int, trigger_id: int, after: int, upto: int, now: datetime
) -> None:
    """Append a trigger's events ``after < sequence_index <= upto`` as stream items."""
    stream_id, length = _stream_id(conn, ti_id, now)
    conn.execute(
        insert(StreamItem).from_select(
            ["stream_id", "index", "value"],
            select(
                literal(stream_id),
                TriggerEvent.sequence_index - (after + 1) + length,
                TriggerEvent.payload,
            ).where(
                TriggerEvent.trigger_id == trigger_id,
                TriggerEvent.sequence_index > after,
                TriggerEvent.sequence_index <= upto,
            ),
        )
    )
    conn.execute(update(Stream).where(Stream.id == stream_id).values(length=length + upto - after))


def close_stream(conn: Connection, ti_id: int, now: datetime) -> None:
    """Mark the task instance's output stream complete (if it has one)."""
    conn.execute(
        update(Stream)
        .where(Stream.task_instance_id == ti_id, Stream.key == RETURN_VALUE)
        .values(closed=True, closed_at=now)
    )


def read_items(conn: Connection, ti_id: int, start: int = 0, limit: int = 1000) -> list[str]:
    """A page of a stream's items (JSON text), from index ``start``."""
    return list(
        conn.scalars(
            select(StreamItem.value)
            .join(Stream, Stream.id == StreamItem.stream_id)
            .where(
                Stream.task_instance_id == ti_id,
                Stream.key == RETURN_VALUE,
                StreamItem.index >= start,
            )
            .order_by(StreamItem.index)
            .limit(limit)
        )
    )


def reset_streams(conn: Connection, ti_ids: Sequence[int]) -> None:
    """Forget the output of earlier tries: a new try starts a fresh trigger run."""
    if ti_ids:
        stream_ids = select(Stream.id).where(Stream.task_instance_id.in_(list(ti_ids)))
        conn.execute(delete(StreamItem).where(StreamItem.stream_id.in_(stream_ids)))
        conn.execute(delete(Stream).where(Stream.task_instance_id.in_(list(ti_ids))))


def stream_summaries(
    conn: Connection,
    *,
    dag_run_id: int | None = None,
    dag_id: str | None = None,
    task_instance_id: int | None = None,
    after_task_instance_id: int | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """Per streaming task instance: produced, acknowledged, pending, items, rate, paused.

    In task instance order; ``after_task_instance_id`` and ``limit`` page through them.
    """
    # Only the events of the triggers asked about: the table may hold millions.
    scope = select(TaskInstance.trigger_id).where(TaskInstance.trigger_id.is_not(None))
    if dag_run_id is not None:
        scope = scope.where(TaskInstance.dag_run_id == dag_run_id)
    if dag_id is not None:
        scope = scope.where(TaskInstance.dag_id == dag_id)
    if task_instance_id is not None:
        scope = scope.where(TaskInstance.id == task_instance_id)
    first_last = (
        select(
            TriggerEvent.trigger_id,
            func.min(TriggerEvent.created_at).label("first_at"),
            func.max(TriggerEvent.created_at).label("last_at"),
            func.count().label("stored"),
        )
        .where(TriggerEvent.trigger_id.in_(scope))
        .group_by(TriggerEvent.trigger_id)
        .subquery()
    )
    q = (
        select(
            TaskInstance.id,
            TaskInstance.dag_id,
            TaskInstance.run_id,
            TaskInstance.task_id,
            TaskInstance.map_index,
            TaskInstance.state,
            Trigger.id.label("trigger_id"),
            Trigger.consumer,
            Trigger.next_sequence,
            Trigger.acked_sequence,
            Trigger.max_pending_events,
            Trigger.completed,
            Stream.length,
            Stream.closed,
            first_last.c.first_at,
            first_last.c.last_at,
            first_last.c.stored,
        )
        .join(Trigger, Trigger.id == TaskInstance.trigger_id)
        .outerjoin(Stream, Stream.task_instance_id == TaskInstance.id)
        .outerjoin(first_last, first_last.c.trigger_id == Trigger.id)
        .order_by(TaskInstance.id)
    )
    if dag_run_id is not None:
        q = q.where(TaskInstance.dag_run_id == dag_run_id)
    if dag_id is not None:
        q = q.where(TaskInstance.dag_id == dag_id)
    if task_instance_id is not None:
        q = q.where(TaskInstance.id == task_instance_id)
    if after_task_instance_id is not None:
        q = q.where(TaskInstance.id > after_task_instance_id)
    if limit is not None:
        q = q.limit(limit)
    out = []
    for r in conn.execute(q):
        produced = r.next_sequence
        acknowledged = r.acked_sequence + 1
        pending = max(0, produced - acknowledged)
        span = (r.last_at - r.first_at).total_seconds() if r.first_at and r.last_at else 0.0
        out.append(
            {
                "task_instance_id": r.id,
                "dag_id": r.dag_id,
                "run_id": r.run_id,
                "task_id": r.task_id,
                "map_index": r.map_index,
                "task_state": r.state,
                "trigger_id": r.trigger_id,
                "consumer": r.consumer,
                "produced": produced,
                "acknowledged": acknowledged,
                "pending": pending,
                "items": r.length or 0,
                "closed": bool(r.closed),
                "trigger_done": r.completed,
                # Over the events still stored: consumed ones are pruned (ADR 0023).
                "events_per_second": round((r.stored - 1) / span, 1) if span > 0 else None,
                "paused_by_backpressure": bool(
                    r.max_pending_events and not r.completed and pending >= r.max_pending_events
                ),
            }
        )
    letters = dead_letters.counts(conn, [s["task_instance_id"] for s in out])
    for summary in out:
        summary["dead_letters"] = letters.get(summary["task_instance_id"], 0)
    return out


# At most this many stream items go in one transaction (retention, `db clean`): a
# scheduler pass, or SQLite's other writers, never wait long behind a delete.
DELETE_BATCH = 5000
_FINISHED_RUNS = (DagRunState.SUCCESS, DagRunState.FAILED)


def delete_stream_items(
    conn: Connection, stream_id: int, length: int, now: datetime, budget: int = DELETE_BATCH
) -> int:
    """Delete up to ``budget`` of a stream's items, lowest indexes first; once none are
    left its header records when. Returns how many went."""
    lowest = conn.scalar(
        select(func.min(StreamItem.index)).where(StreamItem.stream_id == stream_id)
    )
    if lowest is None:
        conn.execute(update(Stream).where(Stream.id == stream_id).values(items_removed_at=now))
        return 0
    upto = lowest + budget
    conn.execute(
        delete(StreamItem).where(StreamItem.stream_id == stream_id, StreamItem.index < upto)
    )
    if upto >= length:
        conn.execute(update(Stream).where(Stream.id == stream_id).values(items_removed_at=now))
    return min(budget, max(length - lowest, 0))


def expired_streams(
    conn: Connection, now: datetime, default_retention: float, limit: int = 100
) -> list[tuple[int, int]]:
    """(stream id, length) of finished runs' streams kept past their retention: the DAG's
    ``stream_retention`` or, without one, ``default_retention`` seconds after the run ended."""
    own = conn.execute(
        select(Dag.dag_id, Dag.stream_retention).where(Dag.stream_retention.is_not(None))
    ).all()
    by_retention: dict[float, list[str]] = {}
    for dag_id, retention in own:
        by_retention.setdefault(retention or 0.0, []).append(dag_id)
    base = (
        select(Stream.id, Stream.length)
        .join(TaskInstance, TaskInstance.id == Stream.task_instance_id)
        .join(DagRun, DagRun.id == TaskInstance.dag_run_id)
        .where(Stream.items_removed_at.is_(None), DagRun.state.in_(_FINISHED_RUNS))
        .order_by(Stream.id)
        .limit(limit)
    )
    found: list[tuple[int, int]] = []
    groups: list[tuple[float, ColumnElement[bool]]] = [
        (retention, DagRun.dag_id.in_(dag_ids)) for retention, dag_ids in by_retention.items()
    ]
    groups.append((default_retention, DagRun.dag_id.not_in([d for d, _ in own]) if own else true()))
    for retention, which in groups:
        cutoff = now - timedelta(seconds=retention)
        found.extend(
            (r.id, r.length) for r in conn.execute(base.where(which, DagRun.end_date < cutoff))
        )
    return sorted(found)[:limit]


def expire_streams(
    conn: Connection, now: datetime, default_retention: float, budget: int = DELETE_BATCH
) -> tuple[int, bool]:
    """Delete up to ``budget`` items of streams past their retention; returns how many
    went and whether more are due."""
    left = budget
    for stream_id, length in expired_streams(conn, now, default_retention):
        if left <= 0:
            return budget, True
        left -= delete_stream_items(conn, stream_id, length, now, left)
    return budget - left, left <= 0
