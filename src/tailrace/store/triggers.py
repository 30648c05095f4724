"""Trigger rows: created when a task defers or starts in the triggerer, completed when
its task is done with it (the triggerer then cancels it)."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, insert, update

from tailrace.db.models import Trigger


def create_trigger(
    conn: Connection,
    *,
    classpath: str,
    kwargs: dict[str, Any],
    consumer: str,
    max_pending_events: int | None,
    now: datetime,
    timeout_outcome: str = "failed",
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
