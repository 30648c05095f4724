"""Property: whatever the batch size and wherever a step crashes (its transaction rolls
back), a stream's events reach the task's output exactly once, in order. And a direct
stream's events go in the step that copies and acknowledges them (ADR 0049)."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Connection, Engine, func, insert, select, update

from tailrace.dag_processing._parse import ParsedFile
from tailrace.dag_processing.processor import sync_parsed
from tailrace.dagrun import trigger_dag_run
from tailrace.db.models import TaskInstance, Trigger, TriggerEvent
from tailrace.execution import TaskFinished
from tailrace.scheduler._triggers import consume_trigger_events, pending_events
from tailrace.scheduler.reports import apply_executor_events
from tailrace.serialization import (
    SerializedDag,
    SerializedSchedule,
    SerializedTask,
    dumps,
    loads,
)
from tailrace.streams import read_items


class Crash(Exception):
    """A step dies mid-transaction: everything it wrote rolls back."""


def _dag(batch: int) -> SerializedDag:
    return SerializedDag(
        dag_id=f"stream_b{batch}",
        fileloc="/nowhere/stream.py",
        schedule=SerializedSchedule(kind="none"),
        tasks=[
            SerializedTask(
                task_id="consume",
                operator="Collect",
                max_batch_size=batch,
                max_batch_latency=0.0,
                handles_events=True,
            )
        ],
    )


def _deferred_consumer(
    engine: Engine,
    batch: int,
    events: int,
    *,
    consumer: str = "batch",
    completed: bool = True,
    acked: int = -1,
    pruned: int = -1,
) -> tuple[int, int]:
    """A deferred consumer whose trigger produced `events` events, those up to `acked`
    acknowledged and up to `pruned` deleted (`direct`: a task without a resume method)."""
    now = datetime.now(UTC)
    dag = _dag(batch)
    with engine.begin() as conn:
        sync_parsed(
            conn, "/nowhere", [ParsedFile(path=dag.fileloc, dags={dag.dag_id: dumps(dag)})], now
        )
    pk, _ = trigger_dag_run(engine, dag.dag_id, {})
    with engine.begin() as conn:
        trigger_id = conn.execute(
            insert(Trigger)
            .values(
                classpath="x.Pager",
                kwargs={},
                created_at=now,
                consumer=consumer,
                trigger_run_id="run",
                next_sequence=events,
                acked_sequence=acked,
                pruned_sequence=pruned,
                completed=completed,
            )
            .returning(Trigger.id)
        ).scalar_one()
        if events > pruned + 1:
            conn.execute(
                insert(TriggerEvent),
                [
                    {
                        "trigger_id": trigger_id,
                        "trigger_run_id": "run",
                        "sequence_index": i,
                        "payload": dumps({"page": i}),
                        "is_last": completed and i == events - 1,
                        "created_at": now,
                    }
                    for i in range(pruned + 1, events)
                ],
            )
        ti_id = conn.scalar(select(TaskInstance.id).where(TaskInstance.dag_run_id == pk))
        conn.execute(
            update(TaskInstance)
            .where(TaskInstance.id == ti_id)
            .values(
                state="deferred",
                try_number=1,
                trigger_id=trigger_id,
                next_method=None if consumer == "direct" else "handle_trigger_events",
                next_kwargs={},
            )
        )
    return ti_id, trigger_id


def _task_for(conn: Connection, version_id: int, task_id: str) -> SerializedTask:
    from tailrace.db.models import DagVersion

    data = conn.scalar(select(DagVersion.data).where(DagVersion.id == version_id))
    assert data is not None
    return msgspec.convert(loads(data), SerializedDag).task(task_id)


def _step(engine: Engine, ti_id: int, trigger_id: int, batch: int, crash_at: str | None) -> None:
    """One scheduler pass plus the worker's report, crashing where told."""
    now = datetime.now(UTC)
    with engine.begin() as conn:
        consume_trigger_events(conn, _task_for, now)
        state = conn.scalar(select(TaskInstance.state).where(TaskInstance.id == ti_id))
        if state != "scheduled":
            return
        acked = conn.scalar(select(Trigger.acked_sequence).where(Trigger.id == trigger_id))
        events = pending_events(conn, trigger_id, acked, batch)
        if crash_at == "before_handling":
            raise Crash
        conn.execute(update(TaskInstance).where(TaskInstance.id == ti_id).values(state="running"))
        report = TaskFinished(
            ti_id=ti_id,
            try_number=1,
            outcome="success" if events[-1].is_last else "handled",
            start_date=now,
            end_date=now,
            stream_items=[e.payload for e in events],
            acked_sequence=events[-1].sequence_index,
        )
        apply_executor_events(conn, [report], _task_for, now)
        if crash_at == "before_commit":
            raise Crash


@pytest.mark.parametrize("db_backend", ["sqlite"])
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batch=st.integers(min_value=1, max_value=7),
    events=st.integers(min_value=0, max_value=30),
    crashes=st.lists(
        st.sampled_from([None, None, "before_handling", "before_commit"]), max_size=40
    ),
)
def test_every_event_reaches_the_stream_once_in_order(
    engine: Engine, batch: int, events: int, crashes: list[str | None]
) -> None:
    ti_id, trigger_id = _deferred_consumer(engine, batch, events)
    plan = iter(crashes)
    for _ in range(10 * (events + 2)):
        with engine.connect() as conn:
            if conn.scalar(select(TaskInstance.state).where(TaskInstance.id == ti_id)) == "success":
                break
        with contextlib.suppress(Crash):
            _step(engine, ti_id, trigger_id, batch, next(plan, None))
    with engine.connect() as conn:
        assert conn.scalar(select(TaskInstance.state).where(TaskInstance.id == ti_id)) == "success"
        items = [loads(v)["page"] for v in read_items(conn, ti_id, 0, 1000)]
    assert items == list(range(events))


def _stored(engine: Engine, trigger_id: int) -> tuple[int, int, int]:
    """The trigger's acknowledgement, its pruning watermark, and its events left."""
    with engine.connect() as conn:
        acked, pruned = conn.execute(
            select(Trigger.acked_sequence, Trigger.pruned_sequence).where(Trigger.id == trigger_id)
        ).one()
        left = conn.scalar(
            select(func.count())
            .select_from(TriggerEvent)
            .where(TriggerEvent.trigger_id == trigger_id)
        )
    return acked, pruned, left or 0


DIRECT = 40


@pytest.mark.parametrize("completed", [False, True], ids=["running", "completed"])
def test_a_direct_streams_events_are_deleted_in_the_step_that_copies_them(
    engine: Engine, completed: bool
) -> None:
    ti_id, trigger_id = _deferred_consumer(
        engine, 1, DIRECT, consumer="direct", completed=completed, acked=9, pruned=9
    )
    with engine.begin() as conn:
        applied, _ = consume_trigger_events(conn, _task_for, datetime.now(UTC))
    assert _stored(engine, trigger_id) == (DIRECT - 1, DIRECT - 1, 0)
    assert applied.pruned_events == DIRECT - 10
    # A running trigger has nothing left to prune; a completed one may (its unread end,
    # once nobody uses it), so the scheduler's prune still looks at it.
    assert applied.pruned_triggers == (set() if completed else {trigger_id})
    with engine.connect() as conn:
        items = [loads(v)["page"] for v in read_items(conn, ti_id, 0, 100)]
    assert items == list(range(10, DIRECT))


def test_a_direct_stream_whose_pruning_is_behind_is_left_to_the_prune(engine: Engine) -> None:
    """Events acknowledged earlier and not yet deleted: the step leaves them all to the
    prune, whose budget bounds how many go in one transaction."""
    _, trigger_id = _deferred_consumer(
        engine, 1, DIRECT, consumer="direct", completed=False, acked=9, pruned=4
    )
    with engine.begin() as conn:
        applied, _ = consume_trigger_events(conn, _task_for, datetime.now(UTC))
    assert _stored(engine, trigger_id) == (DIRECT - 1, 4, DIRECT - 5)
    assert (applied.pruned_events, applied.pruned_triggers) == (0, set())
