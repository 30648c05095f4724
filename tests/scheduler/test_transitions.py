"""The task-instance state machine and the scheduler's pass, against a real database and
no processes: a recording executor takes the workloads, the test plays the workers."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, select
from sqlalchemy import event as sa_event

from tailrace import transitions
from tailrace.dag_processing._parse import ParsedFile
from tailrace.dag_processing.processor import sync_parsed
from tailrace.dagrun import clear_task_instances, mark_task_instances, trigger_dag_run
from tailrace.db.models import DagCallback, TaskInstance, TaskInstanceHistory
from tailrace.execution import (
    DagCallbackFinished,
    RunDagCallback,
    RunTask,
    TaskFinished,
    TaskStarted,
    Workload,
)
from tailrace.executors.base import BaseExecutor, EventSink, XComSource
from tailrace.scheduler import Scheduler
from tailrace.serialization import SerializedDag, SerializedSchedule, SerializedTask, dumps
from tailrace.testing import FakeClock
from tailrace.transitions import Transition


class RecordingExecutor(BaseExecutor):
    """Takes workloads and runs nothing: the test reports for the workers."""

    def __init__(self) -> None:
        self.workloads: list[Workload] = []
        self.terminated: list[int] = []
        self.callbacks: list[RunDagCallback] = []

    def start(self, on_event: EventSink, xcom_source: XComSource) -> None:
        pass

    def queue_workloads(self, workloads: Sequence[Workload], *, backlog: bool = False) -> None:
        self.workloads.extend(workloads)

    def terminate(self, ti_ids: Sequence[int]) -> None:
        self.terminated.extend(ti_ids)

    def stop(self) -> None:
        pass

    def take(self) -> list[RunTask]:
        taken = [w for w in self.workloads if isinstance(w, RunTask)]
        self.callbacks.extend(w for w in self.workloads if isinstance(w, RunDagCallback))
        self.workloads = []
        return taken


def _dag(retries: int = 0, **fields: Any) -> SerializedDag:
    return SerializedDag(
        **fields,
        dag_id="chain",
        fileloc="/nowhere/chain.py",
        schedule=SerializedSchedule(kind="none"),
        tasks=[
            SerializedTask(task_id="a", operator="Op", downstream=["b"], retries=retries),
            SerializedTask(task_id="b", operator="Op", upstream=["a"], retries=retries),
        ],
    )


class World:
    def __init__(
        self,
        engine: Engine,
        log_folder: Path,
        retries: int = 0,
        executor: RecordingExecutor | None = None,
        **dag_fields: Any,
    ) -> None:
        self.engine = engine
        self.clock = FakeClock(datetime(2026, 12, 1, 12, tzinfo=UTC))
        dag = _dag(retries, **dag_fields)
        with engine.begin() as conn:
            parsed = ParsedFile(path=dag.fileloc, dags={dag.dag_id: dumps(dag)})
            sync_parsed(conn, "/nowhere", [parsed], self.clock())
        self.executor = executor or RecordingExecutor()
        self.scheduler = Scheduler(
            engine, self.executor, log_folder=log_folder, poll_interval=3600, clock=self.clock
        )
        self.scheduler.start()
        self.run_pk, _ = trigger_dag_run(engine, dag.dag_id, {})
        self.transitions: list[transitions.Transition] = []

    def record(self, conn: Connection, transitions: Sequence[Transition]) -> None:
        self.transitions.extend(transitions)

    def step(self, *events: TaskStarted | TaskFinished | DagCallbackFinished) -> list[RunTask]:
        for event in events:
            self.scheduler.inbox.put(event)
        self.scheduler.wake()
        self.scheduler.step()
        return self.executor.take()

    def started(self, w: RunTask) -> TaskStarted:
        return TaskStarted(
            ti_id=w.ti_id, try_number=w.try_number, pid=1, hostname="h", start_date=self.clock()
        )

    def finished(
        self, w: RunTask, outcome: str = "success", error: str | None = None
    ) -> TaskFinished:
        return TaskFinished(
            ti_id=w.ti_id,
            try_number=w.try_number,
            outcome=outcome,  # type: ignore[arg-type]
            start_date=self.clock(),
            end_date=self.clock(),
            error=error,
        )

    def states(self) -> dict[str, tuple[str | None, int]]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(TaskInstance.task_id, TaskInstance.state, TaskInstance.try_number).where(
                    TaskInstance.dag_run_id == self.run_pk
                )
            )
            return {r.task_id: (r.state, r.try_number) for r in rows}

    def history(self) -> list[tuple[str, int, str]]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(
                    TaskInstance.task_id, TaskInstanceHistory.try_number, TaskInstanceHistory.state
                )
                .join(TaskInstance, TaskInstance.id == TaskInstanceHistory.task_instance_id)
                .order_by(TaskInstanceHistory.id)
            )
            return [tuple(r) for r in rows]  # type: ignore[misc]


@pytest.fixture
def world(engine: Engine, tmp_path: Path) -> Iterator[World]:
    w = World(engine, tmp_path / "logs")
    unregister = transitions.register_hook(w.record)
    yield w
    unregister()
    w.scheduler.stop()


def test_a_chain_moves_through_its_states_and_tells_the_hook(world: World) -> None:
    [a] = world.step()
    assert (a.task_id, a.try_number) == ("a", 1)
    assert world.states() == {"a": ("queued", 1), "b": (None, 0)}
    [b] = world.step(world.started(a), world.finished(a))
    assert b.task_id == "b"
    assert world.step(world.started(b), world.finished(b)) == []
    assert world.states() == {"a": ("success", 1), "b": ("success", 1)}
    assert world.history() == [("a", 1, "success"), ("b", 1, "success")]
    kinds = [(t.kind, t.ti_id, t.state) for t in world.transitions]
    assert kinds == [
        ("queue", a.ti_id, "queued"),
        ("start", a.ti_id, "running"),
        ("finish", a.ti_id, "success"),
        ("queue", b.ti_id, "queued"),
        ("start", b.ti_id, "running"),
        ("finish", b.ti_id, "success"),
    ]


def test_a_start_reported_with_its_end_is_written_by_the_same_update(world: World) -> None:
    [a] = world.step()
    updates: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith("UPDATE task_instance SET"):
            updates.append(statement)

    sa_event.listen(world.engine, "before_cursor_execute", count)
    try:
        [b] = world.step(world.started(a), world.finished(a))
    finally:
        sa_event.remove(world.engine, "before_cursor_execute", count)
    # The start and end of a, then b queued: two UPDATEs, not three.
    assert len(updates) == 2
    with world.engine.connect() as conn:
        row = conn.execute(
            select(TaskInstance.state, TaskInstance.hostname, TaskInstance.pid).where(
                TaskInstance.id == a.ti_id
            )
        ).one()
    assert tuple(row) == ("success", "h", 1)
    kinds = [(t.kind, t.ti_id) for t in world.transitions]
    assert kinds[-3:] == [("start", a.ti_id), ("finish", a.ti_id), ("queue", b.ti_id)]


def test_a_start_apart_from_its_end_is_still_written(world: World) -> None:
    [a] = world.step()
    world.step(world.started(a))
    assert world.states()["a"] == ("running", 1)
    [b] = world.step(world.finished(a))
    assert b.task_id == "b"
    assert [t.kind for t in world.transitions if t.ti_id == a.ti_id] == [
        "queue",
        "start",
        "finish",
    ]


def test_a_report_for_a_superseded_try_changes_nothing(world: World) -> None:
    [a] = world.step()
    world.step(world.started(a))
    with world.engine.begin() as conn:
        clear_task_instances(conn, world.run_pk, ["a"], world.clock())
    [again] = world.step()
    assert again.try_number == 2
    seen = len(world.transitions)
    # The first try's worker finishes late: its report is stale, nothing moves.
    world.step(world.finished(a, "failed", "late"))
    assert world.states()["a"] == ("queued", 2)
    assert world.history() == []
    assert [t.kind for t in world.transitions[seen:]] == []


def test_a_failed_try_retries_after_its_delay_and_history_keeps_both(
    engine: Engine, tmp_path: Path
) -> None:
    world = World(engine, tmp_path / "logs", retries=1)
    [a] = world.step()
    world.step(world.started(a), world.finished(a, "failed", "boom"))
    assert world.states()["a"] == ("up_for_retry", 1)
    assert world.step() == []  # the retry delay has not passed
    world.clock.advance(timedelta(seconds=301))
    [retry] = world.step()
    assert (retry.task_id, retry.try_number) == ("a", 2)
    world.step(world.started(retry), world.finished(retry))
    assert world.history() == [("a", 1, "failed"), ("a", 2, "success")]
    world.scheduler.stop()


def test_a_failure_without_retries_fails_downstream_unrun(world: World) -> None:
    [a] = world.step()
    world.step(world.started(a), world.finished(a, "failed", "boom"))
    assert world.states() == {"a": ("failed", 1), "b": ("upstream_failed", 0)}
    finals = {(t.kind, t.state) for t in world.transitions if t.ti_id != a.ti_id}
    assert finals == {("finish_unrun", "upstream_failed")}


def test_a_hook_that_fails_rolls_the_transition_back(world: World) -> None:
    [a] = world.step()

    def refuse(conn: Connection, transitions: Sequence[Transition]) -> None:
        if any(t.kind == "start" for t in transitions):
            raise RuntimeError("hook refused")

    unregister = transitions.register_hook(refuse)
    try:
        with pytest.raises(RuntimeError, match="hook refused"):
            world.step(world.started(a))
    finally:
        unregister()
    assert world.states()["a"] == ("queued", 1)
    # The report was kept, not lost: the next step applies it.
    world.step()
    assert world.states()["a"] == ("running", 1)


def test_mark_and_clear_are_transitions_too(world: World) -> None:
    [a] = world.step()
    with world.engine.begin() as conn:
        mark_task_instances(conn, world.run_pk, ["a"], "success", world.clock())
    assert world.states()["a"] == ("success", 1)
    with world.engine.begin() as conn:
        clear_task_instances(conn, world.run_pk, None, world.clock())
    assert world.states() == {"a": (None, 1), "b": (None, 0)}
    kinds = [(t.kind, t.ti_id) for t in world.transitions]
    assert ("mark", a.ti_id) in kinds
    assert sorted(k for k, _ in kinds if k == "clear") == ["clear", "clear"]
    with pytest.raises(ValueError, match="can only mark"), world.engine.begin() as conn:
        transitions.mark(conn, [a.ti_id], "running", world.clock())


def test_an_orphaned_queued_try_is_over_and_the_next_is_a_new_try(world: World) -> None:
    [a] = world.step()
    with world.engine.begin() as conn:
        transitions.reset_orphan(conn, a.ti_id, world.clock(), "its scheduler died")
    # The try may have begun on a worker that died with its scheduler: it stays a try.
    assert world.states()["a"] == (None, 1)
    assert world.history() == [("a", 1, "failed")]
    world.scheduler.runs_changed([world.run_pk])  # as the orphan check tells it
    [a2] = world.step()
    assert a2.try_number == 2 and a2.log_path != a.log_path
    # Only a queued try is an orphan's to reset; the loss cost no retry (retries=0 here).
    world.step(world.started(a2))
    with world.engine.begin() as conn:
        transitions.reset_orphan(conn, a2.ti_id, world.clock(), "again")
    assert world.states()["a"] == ("running", 2)
    world.step(world.finished(a2, "failed", "boom"))
    assert world.states()["a"] == ("failed", 2)
    assert [t.kind for t in world.transitions].count("orphan") == 1


def test_a_start_for_the_wrong_try_is_refused(world: World) -> None:
    [a] = world.step()
    stale = TaskStarted(
        ti_id=a.ti_id, try_number=a.try_number + 1, pid=1, hostname="h", start_date=world.clock()
    )
    with world.engine.begin() as conn:
        assert transitions.start_one(conn, stale) is None
        assert transitions.heartbeat(conn, a.ti_id, a.try_number, world.clock()) is False
    assert world.states()["a"] == ("queued", 1)


def test_a_finished_run_tells_the_run_hooks_and_hands_its_dag_callback_to_a_worker(
    engine: Engine, tmp_path: Path
) -> None:
    world = World(engine, tmp_path / "logs", has_on_failure_callback=True)
    runs: list[transitions.RunTransition] = []
    unregister = transitions.register_run_hook(lambda conn, batch: runs.extend(batch))
    try:
        [a] = world.step()
        world.step(world.started(a), world.finished(a, "failed", "boom"))
        assert [(r.kind, r.state, r.reason) for r in runs] == [
            ("start", "running", None),
            ("finish", "failed", "task_failure"),
        ]
        # The scheduler runs none of it: the callback goes to the executor as a workload.
        [callback] = world.executor.callbacks
        assert (callback.dag_id, callback.kind, callback.reason) == (
            "chain",
            "failure",
            "task_failure",
        )
        assert callback.fileloc == "/nowhere/chain.py"
        assert world.step() == []
        assert len(world.executor.callbacks) == 1  # handed over once
        world.step(DagCallbackFinished(callback_id=callback.callback_id, ok=False, error="no"))
        with engine.connect() as conn:
            row = conn.execute(select(DagCallback)).one()
        assert (row.state, row.error) == ("failed", "no")
    finally:
        unregister()
        world.scheduler.stop()
