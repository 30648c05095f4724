"""The triggerer's database side against a real database: no loop, no threads, no processes."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, func, insert, select, update

from tailrace.dag_processing._parse import ParsedFile
from tailrace.dag_processing.processor import sync_parsed
from tailrace.dagrun import trigger_dag_run
from tailrace.db.errors import NaiveDatetimeError
from tailrace.db.models import Job, TaskInstance, Trigger, TriggerDedup, TriggerEvent
from tailrace.serialization import SerializedDag, SerializedSchedule, SerializedTask, dumps
from tailrace.store.triggers import expire_dedup_records, prune_events
from tailrace.testing import FakeClock
from tailrace.triggerer._store import Envelope, TriggerStore, acked_sequences, sqlite_utc_text

LEASE = 30.0
NOW = datetime(2026, 12, 8, tzinfo=UTC)


@pytest.fixture
def conn(engine: Engine) -> Iterator[Connection]:
    with engine.begin() as conn:
        yield conn


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def new_triggers(conn: Connection, clock: FakeClock, count: int, **values: Any) -> list[int]:
    return [
        conn.execute(
            insert(Trigger)
            .values(classpath="mod.Pager", kwargs={"n": i}, created_at=clock(), **values)
            .returning(Trigger.id)
        ).scalar_one()
        for i in range(count)
    ]


def store(conn: Connection, clock: FakeClock) -> TriggerStore:
    s = TriggerStore(lease_seconds=LEASE, clock=clock)
    s.register(conn)
    return s


def event(trigger_id: int, epoch: int, seq: int, **fields: Any) -> Envelope:
    values: dict[str, Any] = {
        "created_at": FakeClock()(),
        "trigger_run_id": "run",
        "payload": f'{{"page": {seq}}}',
        "is_last": False,
        "checkpoint": None,
    }
    values.update(fields)
    return Envelope(trigger_id=trigger_id, epoch=epoch, sequence_index=seq, **values)


def stored(conn: Connection, trigger_id: int) -> list[tuple[int, str, bool]]:
    return [
        (r.sequence_index, r.payload, r.is_last)
        for r in conn.execute(
            select(TriggerEvent.sequence_index, TriggerEvent.payload, TriggerEvent.is_last)
            .where(TriggerEvent.trigger_id == trigger_id)
            .order_by(TriggerEvent.sequence_index)
        )
    ]


def trigger_row(conn: Connection, trigger_id: int) -> Any:
    return conn.execute(select(Trigger).where(Trigger.id == trigger_id)).one()


def test_a_claim_takes_free_triggers_in_order_up_to_the_room_left(
    conn: Connection, clock: FakeClock
) -> None:
    first, second, third = new_triggers(conn, clock, 3)
    (resumed,) = new_triggers(conn, clock, 1, trigger_run_id="earlier-run", next_sequence=7)
    triggerer = store(conn, clock)

    claims = triggerer.sync(conn, None, 2).claims
    assert [c.trigger_id for c in claims] == [first, second]
    assert {c.epoch for c in claims} == {1}
    assert [c.kwargs for c in claims] == [{"n": 0}, {"n": 1}]
    # A first claim starts the trigger's run; every row records the holder.
    (run_id,) = {c.trigger_run_id for c in claims}
    assert run_id
    assert {trigger_row(conn, t).triggerer_job_id for t in (first, second)} == {triggerer.job_id}
    assert trigger_row(conn, third).triggerer_job_id is None

    later = triggerer.sync(conn, {first, second}, 5)
    assert later.lost == []
    assert [c.trigger_id for c in later.claims] == [third, resumed]
    # A run that already began keeps its id.
    assert later.claims[1].trigger_run_id == "earlier-run"
    assert triggerer.sync(conn, None, 5).claims == []


def test_a_live_lease_holds_and_an_expired_one_is_taken_over_with_a_new_epoch(
    conn: Connection, clock: FakeClock
) -> None:
    (trigger_id,) = new_triggers(conn, clock, 1)
    first = store(conn, clock)
    (claim,) = first.sync(conn, None, 10).claims

    other_clock = FakeClock(clock())
    second = store(conn, other_clock)
    other_clock.advance(LEASE - 1)
    assert second.sync(conn, None, 10).claims == []  # the first still heartbeats in time
    first.sync(conn, {trigger_id}, 0)  # ... and renews its lease with it
    clock.advance(LEASE - 1)
    first.sync(conn, {trigger_id}, 0)

    # The first stalls: its heartbeat ages past the lease.
    other_clock.advance(2 * LEASE)
    (taken,) = second.sync(conn, None, 10).claims
    assert taken.trigger_id == trigger_id
    assert taken.epoch == claim.epoch + 1
    assert taken.trigger_run_id == claim.trigger_run_id  # the same run, continued
    assert trigger_row(conn, trigger_id).triggerer_job_id == second.job_id
    # The first learns it lost the trigger on its next sync.
    assert first.sync(conn, {trigger_id}, 0).lost == [trigger_id]


def test_a_released_trigger_is_claimable_at_once_and_a_completed_one_never(
    conn: Connection, clock: FakeClock
) -> None:
    (trigger_id,) = new_triggers(conn, clock, 1)
    new_triggers(conn, clock, 1, completed=True)
    first = store(conn, clock)
    (claim,) = first.sync(conn, None, 10).claims
    first.release_all(conn)
    assert conn.scalar(select(Job.state).where(Job.id == first.job_id)) == "stopped"

    second = store(conn, clock)
    (taken,) = second.sync(conn, None, 10).claims  # no lease to wait out
    assert (taken.trigger_id, taken.epoch) == (trigger_id, claim.epoch + 1)


def test_a_stale_epoch_or_another_holder_cannot_write(conn: Connection, clock: FakeClock) -> None:
    (trigger_id,) = new_triggers(conn, clock, 1)
    first = store(conn, clock)
    (claim,) = first.sync(conn, None, 10).claims
    intruder = store(conn, clock)  # never claimed it
    assert intruder.write_events(conn, [event(trigger_id, claim.epoch, 0)]) == 0
    assert first.write_events(conn, [event(trigger_id, claim.epoch - 1, 0)]) == 0
    assert stored(conn, trigger_id) == []
    assert first.write_events(conn, [event(trigger_id, claim.epoch, 0)]) == 1
    assert stored(conn, trigger_id) == [(0, '{"page": 0}', False)]


def test_a_batch_stores_each_sequence_index_once_and_never_moves_next_sequence_back(
    conn: Connection, clock: FakeClock
) -> None:
    a, b = new_triggers(conn, clock, 2)
    triggerer = store(conn, clock)
    claims = {c.trigger_id: c for c in triggerer.sync(conn, None, 10).claims}
    # Two triggers' events interleaved in one batch.
    batch = [event(t, claims[t].epoch, seq) for seq in range(3) for t in (a, b)]
    assert triggerer.write_events(conn, batch) == 6
    # A run resumed from an earlier point yields 1 and 2 again (with other payloads),
    # then new ones: the repeats are dropped, the first writes kept.
    again = [event(a, claims[a].epoch, seq, payload=f'{{"again": {seq}}}') for seq in (1, 2, 3, 4)]
    triggerer.write_events(conn, again)
    assert stored(conn, a) == [
        (0, '{"page": 0}', False),
        (1, '{"page": 1}', False),
        (2, '{"page": 2}', False),
        (3, '{"again": 3}', False),
        (4, '{"again": 4}', False),
    ]
    assert trigger_row(conn, a).next_sequence == 5
    assert trigger_row(conn, b).next_sequence == 3
    triggerer.write_events(conn, [event(a, claims[a].epoch, 0)])
    assert trigger_row(conn, a).next_sequence == 5


def test_a_closing_write_marks_the_last_event_and_completes_the_trigger(
    conn: Connection, clock: FakeClock
) -> None:
    in_batch, later = new_triggers(conn, clock, 2)
    triggerer = store(conn, clock)
    claims = {c.trigger_id: c for c in triggerer.sync(conn, None, 10).claims}

    def close(trigger_id: int, seq: int) -> Envelope:
        return event(trigger_id, claims[trigger_id].epoch, seq, payload="", closes=True)

    # The final event and the close in one batch: written with is_last.
    e = claims[in_batch].epoch
    triggerer.write_events(conn, [event(in_batch, e, 0), event(in_batch, e, 1), close(in_batch, 2)])
    assert stored(conn, in_batch) == [(0, '{"page": 0}', False), (1, '{"page": 1}', True)]
    # The close comes in a batch after its final event: that one is marked in place.
    triggerer.write_events(conn, [event(later, claims[later].epoch, 0)])
    triggerer.write_events(conn, [close(later, 1)])
    assert stored(conn, later) == [(0, '{"page": 0}', True)]
    assert trigger_row(conn, in_batch).completed and trigger_row(conn, later).completed
    # A completed trigger takes nothing more, even from its holder.
    assert triggerer.write_events(conn, [event(later, claims[later].epoch, 1)]) == 0
    assert stored(conn, later) == [(0, '{"page": 0}', True)]


def test_a_takeover_resumes_after_the_last_checkpoint(conn: Connection, clock: FakeClock) -> None:
    (trigger_id,) = new_triggers(conn, clock, 1)
    first = store(conn, clock)
    (claim,) = first.sync(conn, None, 10).claims
    assert (claim.checkpoint, claim.checkpoint_sequence, claim.resume_at) == (None, None, 0)
    first.write_events(
        conn,
        [
            event(trigger_id, claim.epoch, 0, checkpoint={"next": "page-1"}),
            event(trigger_id, claim.epoch, 1, checkpoint={"next": "page-2"}),
            event(trigger_id, claim.epoch, 2),  # no checkpoint: the last one stands
        ],
    )
    assert trigger_row(conn, trigger_id).checkpoint == {"seq": 1, "value": {"next": "page-2"}}

    other_clock = FakeClock(clock() + timedelta(seconds=2 * LEASE))
    (taken,) = store(conn, other_clock).sync(conn, None, 10).claims
    assert taken.checkpoint == {"next": "page-2"}
    assert taken.checkpoint_sequence == 1
    assert taken.resume_at == 2
    # Its last event goes past all three stored, however few it yields again.
    assert taken.stored_up_to == 3


def dedup_records(conn: Connection, trigger_id: int) -> int:
    return (
        conn.scalar(
            select(func.count())
            .select_from(TriggerDedup)
            .where(TriggerDedup.trigger_id == trigger_id)
        )
        or 0
    )


def test_a_message_redelivered_after_its_event_was_pruned_is_dropped_within_the_window(
    conn: Connection, clock: FakeClock
) -> None:
    (trigger_id,) = new_triggers(conn, clock, 1)
    triggerer = store(conn, clock)
    (claim,) = triggerer.sync(conn, None, 10).claims
    keyed = [event(trigger_id, claim.epoch, seq, dedup_key=key) for seq, key in enumerate("abc")]
    assert triggerer.write_events(conn, keyed) == 3
    conn.execute(update(Trigger).where(Trigger.id == trigger_id).values(acked_sequence=2))
    assert prune_events(conn, [trigger_id]) == (3, set())
    assert stored(conn, trigger_id) == []  # queue events are pruned like any other

    # The broker redelivers "a" (its acknowledgement was lost): recognised by its record,
    # not stored, and acknowledged to the source under the sequence it is stored under.
    written = triggerer.write(conn, [event(trigger_id, claim.epoch, 3, dedup_key="a")])
    assert written.duplicates == {(trigger_id, 3): 0}
    assert stored(conn, trigger_id) == []

    window = 60.0
    acked_at = clock()
    assert expire_dedup_records(conn, acked_at, window) == (0, False)  # the clock starts
    assert expire_dedup_records(conn, acked_at + timedelta(seconds=window / 2), window) == (
        0,
        False,
    )
    assert dedup_records(conn, trigger_id) == 3
    later = acked_at + timedelta(seconds=window + 1)
    assert expire_dedup_records(conn, later, window) == (3, False)
    assert dedup_records(conn, trigger_id) == 0
    # Past the window a message is new again: the window must cover the broker's.
    assert triggerer.write_events(conn, [event(trigger_id, claim.epoch, 3, dedup_key="a")]) == 1


def test_dedup_records_of_unacknowledged_events_outlive_the_window(
    conn: Connection, clock: FakeClock
) -> None:
    (trigger_id,) = new_triggers(conn, clock, 1)
    triggerer = store(conn, clock)
    (claim,) = triggerer.sync(conn, None, 10).claims
    keyed = [event(trigger_id, claim.epoch, seq, dedup_key=f"m{seq}") for seq in range(5)]
    triggerer.write_events(conn, keyed)
    conn.execute(update(Trigger).where(Trigger.id == trigger_id).values(acked_sequence=1))
    start = clock()
    expire_dedup_records(conn, start, 10.0)
    # Acknowledged up to 3 meanwhile: only what was acknowledged when the clock started
    # goes once the window has passed, then the rest one window on.
    conn.execute(update(Trigger).where(Trigger.id == trigger_id).values(acked_sequence=3))
    assert expire_dedup_records(conn, start + timedelta(seconds=11), 10.0) == (2, False)
    assert expire_dedup_records(conn, start + timedelta(seconds=15), 10.0) == (0, False)
    assert expire_dedup_records(conn, start + timedelta(seconds=22), 10.0) == (2, False)
    assert dedup_records(conn, trigger_id) == 1  # m4, never acknowledged
    assert expire_dedup_records(conn, start + timedelta(days=1), 10.0, budget=1) == (0, False)
    assert dedup_records(conn, trigger_id) == 1
    conn.execute(update(Trigger).where(Trigger.id == trigger_id).values(completed=True))
    # Completed and used by no instance: its records go whole.
    assert expire_dedup_records(conn, start + timedelta(days=1), 10.0) == (1, False)


def test_acknowledgements_are_read_per_trigger(conn: Connection, clock: FakeClock) -> None:
    a, b = new_triggers(conn, clock, 2)
    conn.execute(Trigger.__table__.update().where(Trigger.id == a).values(acked_sequence=41))
    assert acked_sequences(conn, [a, b]) == {a: 41, b: -1}


def test_event_times_are_stored_as_the_column_type_stores_them(
    conn: Connection, clock: FakeClock
) -> None:
    (trigger_id,) = new_triggers(conn, clock, 1)
    triggerer = store(conn, clock)
    (claim,) = triggerer.sync(conn, None, 10).claims
    moments = [
        datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC),  # no microseconds
        datetime(2026, 3, 1, 13, 30, 0, 250, tzinfo=timezone(timedelta(hours=2))),
        # The same second as the one before (its text is reused), then the same fields
        # but the day, the month, the year (it is not).
        datetime(2026, 3, 1, 11, 30, 0, 999_999, tzinfo=UTC),
        datetime(2026, 3, 2, 11, 30, 0, 7, tzinfo=UTC),
        datetime(2026, 4, 2, 11, 30, 0, 7, tzinfo=UTC),
        datetime(2027, 4, 2, 11, 30, 0, 7, tzinfo=UTC),
    ]
    triggerer.write_events(
        conn, [event(trigger_id, claim.epoch, i, created_at=m) for i, m in enumerate(moments)]
    )
    read = conn.scalars(
        select(TriggerEvent.created_at)
        .where(TriggerEvent.trigger_id == trigger_id)
        .order_by(TriggerEvent.sequence_index)
    ).all()
    assert read == moments
    assert all(m.tzinfo == UTC for m in read)
    if conn.dialect.name == "sqlite":
        # The same text the column type writes, so comparing as text compares instants.
        column_type = TriggerEvent.__table__.c.created_at.type
        process = column_type.dialect_impl(conn.dialect).bind_processor(conn.dialect)
        assert process is not None
        raw = conn.exec_driver_sql(
            "SELECT created_at FROM trigger_event ORDER BY sequence_index"
        ).scalars()
        assert list(raw) == [process(m) for m in moments]
        with pytest.raises(NaiveDatetimeError):
            sqlite_utc_text(datetime(2026, 3, 1))


def test_a_claim_names_the_dag_file_of_its_task_instance_whatever_its_state(
    engine: Engine, clock: FakeClock
) -> None:
    # A trigger class may be defined in the DAG file. A batch consumer runs its batch on
    # a worker while its trigger goes on: a triggerer claiming the trigger then (after
    # the last holder died) must still know which file to import, or the class is
    # "No module named tailrace_dag_…" (seen in the fault matrix's restarted triggerer).
    dag = SerializedDag(
        dag_id="batches",
        fileloc="/dags/batches.py",
        schedule=SerializedSchedule(kind="none"),
        tasks=[SerializedTask(task_id="consume", operator="Batches")],
    )
    with engine.begin() as conn:
        parsed = [ParsedFile(path=dag.fileloc, dags={"batches": dumps(dag)})]
        sync_parsed(conn, "/dags", parsed, NOW)
    pk, _ = trigger_dag_run(engine, "batches", {})
    with engine.begin() as conn:
        (trigger_id,) = new_triggers(conn, clock, 1, consumer="batch")
        conn.execute(
            update(TaskInstance)
            .where(TaskInstance.dag_run_id == pk)
            .values(trigger_id=trigger_id, state="running")
        )
        (claim,) = store(conn, clock).sync(conn, None, 1).claims
    assert claim.task is None  # not deferred just now
    assert claim.fileloc == "/dags/batches.py"
