"""States of DAG runs and task instances, shared by every runtime component."""

from __future__ import annotations

from enum import StrEnum


class DagRunState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"


class TaskInstanceState(StrEnum):
    SCHEDULED = "scheduled"
    QUEUED = "queued"
    RUNNING = "running"
    DEFERRED = "deferred"
    SUCCESS = "success"
    FAILED = "failed"
    UP_FOR_RETRY = "up_for_retry"
    SKIPPED = "skipped"
    UPSTREAM_FAILED = "upstream_failed"
    REMOVED = "removed"


# A task instance with no state yet has not been considered by the scheduler.
FINISHED_TI_STATES = frozenset(
    {
        TaskInstanceState.SUCCESS,
        TaskInstanceState.FAILED,
        TaskInstanceState.SKIPPED,
        TaskInstanceState.UPSTREAM_FAILED,
        TaskInstanceState.REMOVED,
    }
)
FAILED_TI_STATES = frozenset({TaskInstanceState.FAILED, TaskInstanceState.UPSTREAM_FAILED})
ACTIVE_TI_STATES = frozenset(
    {TaskInstanceState.QUEUED, TaskInstanceState.RUNNING, TaskInstanceState.DEFERRED}
)
FINISHED_RUN_STATES = frozenset({DagRunState.SUCCESS, DagRunState.FAILED})


class RunType(StrEnum):
    SCHEDULED = "scheduled"
    MANUAL = "manual"
    ASSET_TRIGGERED = "asset_triggered"
    BACKFILL = "backfill"


def state_after_try(
    outcome: str, try_number: int, max_tries: int, *, dead_letters: bool = False
) -> TaskInstanceState:
    """The state a finished try leaves its task instance in: the one retry rule.

    ``outcome`` is a worker's report ("success", "skipped", "failed", "failed_no_retry").
    A failed try is retried while ``try_number <= max_tries``; "failed_no_retry" never is.
    ``dead_letters``: the try failed handling a batch of trigger events for a task with
    ``stream_retry="dead_letter"`` — after its last retry the batch goes to the dead
    letters and the instance goes on with the stream, so it is up for retry then too.
    The scheduler applies it to reports; the worker, to pick the retry or failure callback.
    """
    if outcome == "success":
        return TaskInstanceState.SUCCESS
    if outcome == "skipped":
        return TaskInstanceState.SKIPPED
    if outcome == "failed" and (try_number <= max_tries or dead_letters):
        return TaskInstanceState.UP_FOR_RETRY
    return TaskInstanceState.FAILED
