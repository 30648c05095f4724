"""Trigger rows: created when a task defers or starts in the triggerer, completed when
its task is done with it (the triggerer then cancels it)."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, and_, bindparam, delete, exists, insert, select, update

from tailrace.db.models import TaskInstance, Trigger, TriggerDedup, TriggerEvent
from tailrace.state import TaskInstanceState as TIS

# At most this many events are deleted in one call: a pass stays short however far
# behind pruning is (the rest goes at the next call).
PRUNE_BATCH = 5000
# A trigger is still read by an instance in these states (a completed trigger's pending
# events, or one a `stream_retry="resume"` retry will wait on).
_USING = (TIS.DEFERRED, TIS.SCHEDULED, TIS.QUEUED, TIS.RUNNING, TIS.UP_FOR_RETRY)


def create_trigger(
    conn: Connection,
    *,
    classpath: str,
    kwargs: dict[str, Any],
    consumer: str,
    max_pending_events: int | None,
    now: datetime,
    timeout_outcome: str = "failed",
    traceparent: str | None = None,
) -> int:
    """A new trigger for the triggerer to claim; returns its id."""
    trigger_id: int = conn.execute(
        insert(Trigger)
        .values(
            classpath=classpath,
            kwargs=kwargs,
            created_at=now,
            consumer=consumer,
            max_pending_events=max_pending_events,
            timeout_outcome=timeout_outcome,
            traceparent=traceparent,
        )
        .returning(Trigger.id)
    ).scalar_one()
    return trigger_id


def complete_triggers(conn: Connection, trigger_ids: Collection[int]) -> int:
    """Mark triggers completed (their triggerer cancels them at its next look); returns
    how many were still running."""
    if not trigger_ids:
        return 0
    done = conn.execute(
        update(Trigger)
        .where(Trigger.id.in_(list(trigger_ids)), Trigger.completed.is_(False))
        .values(completed=True)
    )
    return done.rowcount


def prunable_triggers(conn: Connection, limit: int = 10_000) -> list[int]:
    """Triggers with acknowledged events not yet pruned, or events nobody will read."""
    return list(
        conn.scalars(
            select(Trigger.id)
            .where(
                (Trigger.acked_sequence > Trigger.pruned_sequence)
                | (
                    Trigger.completed.is_(True)
                    & (Trigger.next_sequence - 1 > Trigger.pruned_sequence)
                )
            )
            .order_by(Trigger.id)
            .limit(limit)
        )
    )


def prune_events(
    conn: Connection, trigger_ids: Collection[int], budget: int = PRUNE_BATCH
) -> tuple[int, set[int]]:
    """Delete events no consumer will read again: those at or below the acknowledgement,
    and every event of a completed trigger no instance uses any more.

    The watermark (``pruned_sequence``) moves in the same transaction, under the trigger's
    row lock, so a triggerer re-yielding a pruned event after a failover drops it. At most
    ``budget`` events go; returns how many did and the triggers with more to prune.
    """
    if not trigger_ids:
        return 0, set()
    in_use = exists().where(TaskInstance.trigger_id == Trigger.id, TaskInstance.state.in_(_USING))
    rows = conn.execute(
        select(
            Trigger.id,
            Trigger.acked_sequence,
            Trigger.pruned_sequence,
            Trigger.next_sequence,
            and_(Trigger.completed.is_(True), ~in_use).label("abandoned"),
        )
        .where(Trigger.id.in_(sorted(trigger_ids)))
        .order_by(Trigger.id)
    ).all()
    ranges: list[dict[str, int]] = []
    more: set[int] = set()
    left = budget
    for r in rows:
        bound = r.next_sequence - 1 if r.abandoned else r.acked_sequence
        if bound <= r.pruned_sequence:
            continue
        if left <= 0:
            more.add(r.id)
            continue
        upto = min(bound, r.pruned_sequence + left)
        if upto < bound:
            more.add(r.id)
        ranges.append({"b_id": r.id, "b_from": r.pruned_sequence, "b_upto": upto})
        left -= upto - r.pruned_sequence
    if not ranges:
        return 0, more
    # The watermark first: it takes the row lock the triggerer's fenced write takes.
    conn.execute(
        update(Trigger)
        .where(Trigger.id == bindparam("b_id"))
        .values(pruned_sequence=bindparam("b_upto")),
        ranges,
    )
    _delete_events(conn, ranges)
    return sum(r["b_upto"] - r["b_from"] for r in ranges), more


def acknowledge_consumed(
    conn: Connection, trigger_id: int, after: int, upto: int, *, pruned: int
) -> int:
    """Acknowledge a trigger's events ``after`` < index <= ``upto``, consumed in this
    transaction (a direct stream's, copied into its output). When the watermark
    ``pruned`` stood at ``after`` (nothing older is left), they are deleted too and the
    watermark moves with the acknowledgement, in the one UPDATE: no prune of their own is
    due. Returns how many were deleted."""
    caught_up = pruned == after
    values = {"acked_sequence": upto, **({"pruned_sequence": upto} if caught_up else {})}
    conn.execute(update(Trigger).where(Trigger.id == trigger_id).values(**values))
    if not caught_up or upto <= after:
        return 0
    _delete_events(conn, [{"b_id": trigger_id, "b_from": after, "b_upto": upto}])
    return upto - after


def _delete_events(conn: Connection, ranges: list[dict[str, int]]) -> None:
    """Each trigger's events ``b_from`` < index <= ``b_upto``; its watermark is moved."""
    # A queue trigger's events go too: a redelivery is recognised by the message's
    # dedup record, which stays for the redelivery window (expire_dedup_records).
    conn.execute(
        delete(TriggerEvent).where(
            TriggerEvent.trigger_id == bindparam("b_id"),
            TriggerEvent.sequence_index > bindparam("b_from"),
            TriggerEvent.sequence_index <= bindparam("b_upto"),
        ),
        ranges,
    )


def expire_dedup_records(
    conn: Connection, now: datetime, window: float, budget: int = PRUNE_BATCH
) -> tuple[int, bool]:
    """Delete the dedup records (ADR 0032) of messages acknowledged at least ``window``
    seconds ago, and every record of a completed trigger no instance uses.

    Each trigger's clock is a mark: the acknowledgement as it stood at ``dedup_mark_at``.
    Once ``window`` has passed since, the records at or below the marked sequence go and
    the mark moves to the acknowledgement now: a record lives ``window`` to twice that
    after its event was acknowledged. At most ``budget`` records go; returns how many
    did and whether more are due.
    """
    horizon = now - timedelta(seconds=window)
    deleted = 0
    more = False
    in_use = exists().where(TaskInstance.trigger_id == Trigger.id, TaskInstance.state.in_(_USING))
    for trigger_id in _triggers_with_dedup_records(conn):
        row = conn.execute(
            select(
                Trigger.acked_sequence,
                Trigger.dedup_mark_sequence,
                Trigger.dedup_mark_at,
                and_(Trigger.completed.is_(True), ~in_use).label("abandoned"),
            ).where(Trigger.id == trigger_id)
        ).one()
        if row.abandoned:
            upto: int | None = None
        elif row.dedup_mark_at is None or row.dedup_mark_sequence is None:
            _mark(conn, trigger_id, row.acked_sequence, now)
            continue
        elif row.dedup_mark_at > horizon:
            continue
        else:
            upto = row.dedup_mark_sequence
        if deleted >= budget:
            more = True
            break
        which = select(TriggerDedup.sequence_index).where(TriggerDedup.trigger_id == trigger_id)
        if upto is not None:
            which = which.where(TriggerDedup.sequence_index <= upto)
        last = conn.scalar(
            which.order_by(TriggerDedup.sequence_index).offset(budget - deleted - 1).limit(1)
        )
        bound = upto if last is None else last
        gone = delete(TriggerDedup).where(TriggerDedup.trigger_id == trigger_id)
        if bound is not None:
            gone = gone.where(TriggerDedup.sequence_index <= bound)
        deleted += conn.execute(gone).rowcount
        if last is not None and last != upto:
            more = True  # the rest at the next call, under the same mark
        elif not row.abandoned:
            _mark(conn, trigger_id, row.acked_sequence, now)
    return deleted, more


def _mark(conn: Connection, trigger_id: int, acked: int, now: datetime) -> None:
    conn.execute(
        update(Trigger)
        .where(Trigger.id == trigger_id)
        .values(dedup_mark_sequence=acked, dedup_mark_at=now)
    )


def _triggers_with_dedup_records(conn: Connection) -> list[int]:
    """One index probe per trigger that has records (a few queue triggers), not a scan
    of the records."""
    found: list[int] = []
    last = -1
    while True:
        nxt = conn.scalar(
            select(TriggerDedup.trigger_id)
            .where(TriggerDedup.trigger_id > last)
            .order_by(TriggerDedup.trigger_id)
            .limit(1)
        )
        if nxt is None:
            return found
        found.append(nxt)
        last = nxt
