"""Lease fencing: a triggerer that lost its lease cannot write events for the trigger."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, func, insert, select, update

from tailrace.db.models import Job, Trigger, TriggerEvent
from tailrace.triggerer._store import Envelope, TriggerStore


def envelope(trigger_id: int, epoch: int, seq: int) -> Envelope:
    return Envelope(
        trigger_id=trigger_id,
        epoch=epoch,
        trigger_run_id="run",
        sequence_index=seq,
        payload=f'{{"page": {seq}}}',
        is_last=False,
        checkpoint=None,
        created_at=datetime.now(UTC),
    )


def test_a_stale_triggerer_returning_after_failover_is_fenced_off(engine: Engine) -> None:
    now = datetime.now(UTC)
    with engine.begin() as conn:
        trigger_id = conn.execute(
            insert(Trigger)
            .values(classpath="x.Pager", kwargs={}, created_at=now, trigger_run_id="run")
            .returning(Trigger.id)
        ).scalar_one()
    first = TriggerStore(lease_seconds=30, clock=lambda: now)
    second = TriggerStore(lease_seconds=30, clock=lambda: now)
    with engine.begin() as conn:
        first.register(conn)
        second.register(conn)
        (claim,) = first.sync(conn, None, 10).claims
        assert first.write_events(conn, [envelope(trigger_id, claim.epoch, 0)]) == 1
        # The first triggerer stalls (a long GC pause, a network partition): its heartbeat
        # ages past the lease, and the second takes the trigger over.
        conn.execute(
            update(Job)
            .where(Job.id == first.job_id)
            .values(latest_heartbeat=now - timedelta(seconds=60))
        )
        (taken,) = second.sync(conn, None, 10).claims
        assert taken.epoch == claim.epoch + 1
        assert second.write_events(conn, [envelope(trigger_id, taken.epoch, 1)]) == 1
        # The first comes back and writes as if nothing happened: refused.
        assert first.write_events(conn, [envelope(trigger_id, claim.epoch, 2)]) == 0
        assert first.sync(conn, {trigger_id}, 0).lost == [trigger_id]
        stored = (
            conn.execute(select(TriggerEvent.sequence_index).order_by(TriggerEvent.sequence_index))
            .scalars()
            .all()
        )
        assert stored == [0, 1]
        assert conn.scalar(select(func.count()).select_from(TriggerEvent)) == 2
