"""Dead letters: the trigger events of a batch whose handling failed every try of a task
with ``stream_retry="dead_letter"``. They are recorded with the error and acknowledged —
so their messages are acknowledged to the broker, as handled ones are — and the task goes
on with the rest of its stream."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

import msgspec
from sqlalchemy import Connection, func, insert, select, update

from tailrace.db.models import DeadLetter, Trigger, TriggerEvent


class Letter(msgspec.Struct, frozen=True):
    """A dead letter as listed (the API, the CLI)."""

    id: int
    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    try_number: int
    sequence_index: int
    dedup_key: str | None
    payload: str
    reason: str
    created_at: datetime


def record_batch(
    conn: Connection,
    *,
    ti: Any,
    trigger_id: int,
    first: int,
    last: int,
    try_number: int,
    reason: str,
    now: datetime,
) -> tuple[int, int] | None:
    """Events ``first``..``last`` of the trigger, still unacknowledged, as dead letters of
    task instance ``ti`` (a row with ``id``, ``dag_id``, ``run_id``, ``task_id`` and
    ``map_index``), and acknowledged; returns how many, and the acknowledgement before
    (None: they were acknowledged already)."""
    acked = conn.scalar(select(Trigger.acked_sequence).where(Trigger.id == trigger_id))
    if acked is None or last <= acked:
        return None
    events = conn.execute(
        select(TriggerEvent.sequence_index, TriggerEvent.dedup_key, TriggerEvent.payload)
        .where(
            TriggerEvent.trigger_id == trigger_id,
            TriggerEvent.sequence_index > max(acked, first - 1),
            TriggerEvent.sequence_index <= last,
        )
        .order_by(TriggerEvent.sequence_index)
    ).all()
    if events:
        conn.execute(
            insert(DeadLetter),
            [
                {
                    "task_instance_id": ti.id,
                    "dag_id": ti.dag_id,
                    "run_id": ti.run_id,
                    "task_id": ti.task_id,
                    "map_index": ti.map_index,
                    "try_number": try_number,
                    "trigger_id": trigger_id,
                    "sequence_index": e.sequence_index,
                    "dedup_key": e.dedup_key,
                    "payload": e.payload,
                    "reason": reason,
                    "created_at": now,
                }
                for e in events
            ],
        )
    conn.execute(update(Trigger).where(Trigger.id == trigger_id).values(acked_sequence=last))
    return len(events), acked


def among(conn: Connection, trigger_id: int, keys: list[str]) -> list[tuple[str, str, str]]:
    """The trigger's dead letters among these message ids, as (id, payload JSON, reason):
    what a queue trigger copies to its broker's dead letters before acknowledging them."""
    found: list[Any] = []
    for i in range(0, len(keys), 1000):
        found.extend(
            conn.execute(
                select(DeadLetter.dedup_key, DeadLetter.payload, DeadLetter.reason)
                .where(
                    DeadLetter.trigger_id == trigger_id,
                    DeadLetter.dedup_key.in_(keys[i : i + 1000]),
                )
                .order_by(DeadLetter.sequence_index)
            ).all()
        )
    return [(row.dedup_key or "", row.payload, row.reason) for row in found]


def list_letters(
    conn: Connection,
    *,
    dag_id: str | None = None,
    task_instance_id: int | None = None,
    after: int | None = None,
    limit: int = 100,
    newest_first: bool = False,
) -> list[Letter]:
    """Dead letters in the order they were recorded, or newest first (of one DAG or task
    instance, past id ``after``)."""
    query = select(
        DeadLetter.id,
        DeadLetter.dag_id,
        DeadLetter.run_id,
        DeadLetter.task_id,
        DeadLetter.map_index,
        DeadLetter.try_number,
        DeadLetter.sequence_index,
        DeadLetter.dedup_key,
        DeadLetter.payload,
        DeadLetter.reason,
        DeadLetter.created_at,
    ).order_by(DeadLetter.id.desc() if newest_first else DeadLetter.id)
    if dag_id is not None:
        query = query.where(DeadLetter.dag_id == dag_id)
    if task_instance_id is not None:
        query = query.where(DeadLetter.task_instance_id == task_instance_id)
    if after is not None:
        query = query.where(DeadLetter.id > after)
    return [Letter(*row) for row in conn.execute(query.limit(limit))]


def counts(conn: Connection, task_instance_ids: Collection[int]) -> dict[int, int]:
    """How many dead letters each of these task instances has (those with none left out)."""
    if not task_instance_ids:
        return {}
    return {
        ti_id: n
        for ti_id, n in conn.execute(
            select(DeadLetter.task_instance_id, func.count())
            .where(DeadLetter.task_instance_id.in_(sorted(task_instance_ids)))
            .group_by(DeadLetter.task_instance_id)
        )
    }
