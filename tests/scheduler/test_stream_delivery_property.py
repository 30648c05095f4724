"""Property: whatever the batch size and wherever a step crashes (its transaction rolls
back), a stream's events reach the task's output exactly once, in order."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Connection, Engine, insert, select, update

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


def _deferred_consumer(engine: Engine, batch: int, events: int) -> tuple[int, int]:
    """A deferred batch consumer whose completed trigger produced `events` events."""
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
                consumer="batch",
                trigger_run_id="run",
                next_sequence=events,
                completed=True,
            )
            .returning(Trigger.id)
        ).scalar_one()
        if events:
            conn.execute(
                insert(TriggerEvent),
                [
                    {
                        "trigger_id": trigger_id,
                        "trigger_run_id": "run",
                        "sequence_index": i,
                        "payload": dumps({"page": i}),
                        "is_last": i == events - 1,
                        "created_at": now,
                    }
                    for i in range(events)
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
                next_method="handle_trigger_events",
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
