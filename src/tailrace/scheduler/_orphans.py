"""Task instances whose worker is gone: reset what never started, fail what was running.

Local workers live and die with their scheduler: a queued instance that no live scheduler
owns goes back to be scheduled again as a new try (its worker may have begun the old one
before dying: that try stays in history and its log is kept, and the loss costs no retry);
a running one lost its worker with its scheduler: that try failed, and the usual retry
rules decide what happens next — exactly as if its worker had been killed.

Remote (Celery) workers outlive schedulers and report through the api-server; their
tries are judged by their own heartbeats (ADR 0009): a running try silent for the
heartbeat timeout is lost, a try queued past the queued timeout — no worker took it — fails.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, func, select

from tailrace import jobs, transitions
from tailrace.db.models import TaskInstance
from tailrace.execution import TaskFinished
from tailrace.scheduler.reports import TaskLookup, apply_executor_events
from tailrace.state import TaskInstanceState as TIS


def reset_orphans(
    conn: Connection,
    own_job_id: int,
    now: datetime,
    only_runs: Collection[int] | None,
    task_for: TaskLookup,
    heartbeat_seconds: float,
) -> set[int]:
    live = jobs.live_job_ids(conn, "scheduler", now, heartbeat_seconds) | {own_job_id}
    q = select(
        TaskInstance.id,
        TaskInstance.dag_run_id,
        TaskInstance.state,
        TaskInstance.try_number,
        TaskInstance.queued_by_job_id,
    ).where(TaskInstance.state.in_([TIS.QUEUED, TIS.RUNNING]))
    orphans = [
        row
        for row in conn.execute(q)
        if row.queued_by_job_id not in live and (only_runs is None or row.dag_run_id in only_runs)
    ]
    if not orphans:
        return set()
    for row in orphans:
        if row.state == TIS.QUEUED:
            transitions.reset_orphan(
                conn,
                row.id,
                now,
                f"{jobs.describe(conn, row.queued_by_job_id)}, which queued this try, stopped "
                "heartbeating before the try's start was heard of: if it began, it was lost",
            )
    lost = [
        _lost(
            row,
            now,
            f"{jobs.describe(conn, row.queued_by_job_id)}, whose worker ran this task, "
            "stopped heartbeating: the try is lost",
        )
        for row in orphans
        if row.state == TIS.RUNNING
    ]
    if lost:
        apply_executor_events(conn, lost, task_for, now)
    return {row.dag_run_id for row in orphans}


def fail_silent_remote_tries(
    conn: Connection,
    now: datetime,
    only_runs: Collection[int] | None,
    task_for: TaskLookup,
    *,
    heartbeat_timeout: float,
    queued_timeout: float,
) -> set[int]:
    """Fail remote tries whose worker went silent, or that no worker took."""
    last_word = func.coalesce(
        TaskInstance.last_heartbeat_at, TaskInstance.start_date, TaskInstance.queued_at
    )
    silent = conn.execute(
        select(
            TaskInstance.id, TaskInstance.dag_run_id, TaskInstance.state, TaskInstance.try_number
        ).where(
            (
                (TaskInstance.state == TIS.RUNNING)
                & (last_word < now - timedelta(seconds=heartbeat_timeout))
            )
            | (
                (TaskInstance.state == TIS.QUEUED)
                & (TaskInstance.queued_at < now - timedelta(seconds=queued_timeout))
            )
        )
    ).all()
    silent = [row for row in silent if only_runs is None or row.dag_run_id in only_runs]
    if not silent:
        return set()
    lost = [
        _lost(
            row,
            now,
            f"its worker sent no heartbeat for {heartbeat_timeout:g}s "
            "(task_heartbeat_timeout): the worker died or lost the api-server; the try is lost"
            if row.state == TIS.RUNNING
            else f"no worker took it within {queued_timeout:g}s (task_queued_timeout): "
            "is a `tailrace worker` consuming its queue?",
        )
        for row in silent
    ]
    apply_executor_events(conn, lost, task_for, now)
    return {row.dag_run_id for row in silent}


def _lost(row: Any, now: datetime, error: str) -> TaskFinished:
    """The report a worker that vanished would never send: its try failed."""
    return TaskFinished(
        ti_id=row.id,
        try_number=row.try_number,
        outcome="failed",
        start_date=None,
        end_date=now,
        error=error,
    )
