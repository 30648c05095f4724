"""A remote worker lost (ADR 0024): its running tries run again at once without costing a
retry, at most lost_try_requeues times; the queued tries it may have taken are sent again.
The executor is a recording one that reports a verdict; the scheduler and the state
machine are the real ones, on a real database."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from pathlib import Path

import msgspec
from sqlalchemy import Engine, select
from test_transitions import RecordingExecutor, World

from tailrace.db.models import TaskInstanceHistory
from tailrace.execution import RunTask, TaskStarted
from tailrace.executors.base import WorkerVerdict


class RemoteRecordingExecutor(RecordingExecutor):
    remote = True
    lost_try_requeues = 1

    def __init__(self) -> None:
        super().__init__()
        self.verdict: WorkerVerdict | None = None
        self.handled: list[str] = []

    def worker_verdict(self) -> WorkerVerdict | None:
        return self.verdict

    def workers_handled(self, names: Iterable[str]) -> None:
        self.handled.extend(names)
        assert self.verdict is not None
        self.verdict = WorkerVerdict(self.verdict.alive, {}, self.verdict.lost_after)


def _started_on(world: World, w: RunTask, worker: str) -> TaskStarted:
    return msgspec.structs.replace(world.started(w), worker=worker)


def _lose(world: World, executor: RemoteRecordingExecutor, worker: str) -> list[RunTask]:
    world.clock.advance(timedelta(seconds=1))
    executor.verdict = WorkerVerdict(
        alive=frozenset({"other@h"}), lost={worker: world.clock()}, lost_after=6
    )
    executor.on_workers_lost()  # what the watch does when it finds a loss
    return world.step()


def test_a_lost_workers_try_runs_again_at_once_then_its_queued_tries_are_sent_again(
    engine: Engine, tmp_path: Path
) -> None:
    executor = RemoteRecordingExecutor()
    world = World(engine, tmp_path / "logs", retries=0, executor=executor)
    try:
        [a] = world.step()
        world.step(_started_on(world, a, "w1@h"))
        assert world.states()["a"] == ("running", 1)

        # Lost with its worker: recorded, and a new try at once, though the task has no
        # retries and the default retry_delay.
        [again] = _lose(world, executor, "w1@h")
        assert (again.task_id, again.try_number) == ("a", 2)
        assert world.states()["a"] == ("queued", 2)
        assert executor.handled == ["w1@h"]
        with engine.connect() as conn:
            error = conn.scalar(select(TaskInstanceHistory.error))
        assert "w1@h stopped heartbeating through the broker" in (error or "")

        # Another worker is lost before try 2 started: it may have taken it. The same try
        # is sent again (a second copy, if any, is refused when it starts).
        [resent] = _lose(world, executor, "w2@h")
        assert resent == again
        assert world.states()["a"] == ("queued", 2)

        # A second loss is past lost_try_requeues (1): an ordinary failure, no retries left.
        world.step(_started_on(world, again, "w3@h"))
        assert _lose(world, executor, "w3@h") == []
        assert world.states() == {"a": ("failed", 2), "b": ("upstream_failed", 0)}
        assert world.history() == [("a", 1, "failed"), ("a", 2, "failed")]
    finally:
        world.scheduler.stop()


def test_a_try_of_a_worker_not_heard_yet_is_lost_only_once_silent_for_lost_after(
    engine: Engine, tmp_path: Path
) -> None:
    """A worker's online event can reach the watch after its first try's start reached
    the database: a worker the watch has not heard of is not taken for dead at once."""
    executor = RemoteRecordingExecutor()
    world = World(engine, tmp_path / "logs", retries=0, executor=executor)
    try:
        [a] = world.step()
        world.step(_started_on(world, a, "new@h"))
        executor.verdict = WorkerVerdict(alive=frozenset({"other@h"}), lost={}, lost_after=6)

        world.clock.advance(timedelta(seconds=5))
        executor.on_workers_lost()
        assert world.step() == []
        assert world.states()["a"] == ("running", 1)

        # Unheard, through the broker and through its try, for longer than lost_after.
        world.clock.advance(timedelta(seconds=2))
        executor.on_workers_lost()
        [again] = world.step()
        assert (again.task_id, again.try_number) == ("a", 2)
        with engine.connect() as conn:
            error = conn.scalar(select(TaskInstanceHistory.error))
        assert "new@h stopped heartbeating through the broker" in (error or "")
    finally:
        world.scheduler.stop()
