"""Task instances whose worker is gone: reset what never started, fail what was running.

Local workers live and die with their scheduler (and so do the callbacks it handed them:
they go back to pending, ADR 0034): a queued instance that no live scheduler
owns goes back to be scheduled again as a new try (its worker may have begun the old one
before dying: that try stays in history and its log is kept, and the loss costs no retry);
a running one lost its worker with its scheduler: that try failed, and the usual retry
rules decide what happens next — exactly as if its worker had been killed.

Remote (Celery) workers outlive schedulers and report through the api-server. A scheduler
hears their heartbeats through the broker (ADR 0024): the tries of a worker that went
silent are lost at once, and the queued tries it may have taken are sent again. Each try's
own heartbeat is the fallback (ADR 0009): a running try silent for the heartbeat timeout
is lost, a try queued past the queued timeout — no worker took it — fails. A lost try is
an infrastructure loss: it runs again at once without costing a retry, up to
``lost_try_requeues`` times per instance (`transitions.spare_retry`).
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, func, select

from tailrace import jobs, transitions
from tailrace.db.models import TaskInstance
from tailrace.execution import TaskFinished
from tailrace.executors.base import WorkerVerdict
from tailrace.scheduler.reports import TaskLookup, apply_executor_events
from tailrace.state import TaskInstanceState as TIS
from tailrace.store import dag_callbacks

log = logging.getLogger(__name__)


def _last_heard() -> Any:
    """When a running try's worker was last heard of: its start, then its heartbeats."""
    return func.coalesce(TaskInstance.last_heartbeat_at, TaskInstance.start_date)


def reset_orphans(
    conn: Connection,
    own_job_id: int,
    now: datetime,
    only_runs: Collection[int] | None,
    task_for: TaskLookup,
    heartbeat_seconds: float,
) -> set[int]:
    live = jobs.live_job_ids(conn, "scheduler", now, heartbeat_seconds) | {own_job_id}
    if dag_callbacks.requeue_orphaned(conn, live, only_runs):
        # Dispatched again in this step: the scan that found them dispatches callbacks.
        log.info("callbacks queued by a scheduler that stopped are pending again")
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
    requeues: int,
) -> set[int]:
    """Fail remote tries whose worker went silent, or that no worker took."""
    last_word = func.coalesce(_last_heard(), TaskInstance.queued_at)
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
    spared = transitions.spare_retry(
        conn, [(r.id, r.try_number) for r in silent if r.state == TIS.RUNNING], requeues, now
    )
    apply_executor_events(conn, lost, task_for, now, retry_now=spared)
    return {row.dag_run_id for row in silent}


@dataclass(frozen=True)
class WorkerLosses:
    runs: set[int]
    lost: int
    # Queued tries the lost workers may have taken: to be sent to the broker again.
    resend: list[int]


def lose_tries_of_lost_workers(
    conn: Connection,
    verdict: WorkerVerdict,
    now: datetime,
    only_runs: Collection[int] | None,
    task_for: TaskLookup,
    *,
    own_job_id: int,
    job_heartbeat_seconds: float,
    requeues: int,
) -> WorkerLosses:
    """Running tries of workers that are not alive are lost; queued tries queued before a
    lost worker was last heard (it may have taken them) are sent again: the same try, so
    whichever copy starts first runs it and the other is refused (ADR 0009).

    A worker the watch has not heard of at all may have started a moment ago: its online
    event can reach the watch after its first try's start reached the database. Its tries
    are lost once they too were silent for the verdict's ``lost_after``."""
    running = conn.execute(
        select(
            TaskInstance.id,
            TaskInstance.dag_run_id,
            TaskInstance.try_number,
            TaskInstance.worker_name,
        ).where(
            TaskInstance.state == TIS.RUNNING,
            TaskInstance.worker_name.is_not(None),
            TaskInstance.worker_name.not_in(verdict.alive or {""}),
            TaskInstance.worker_name.in_(verdict.lost or {""})
            | (_last_heard() < now - timedelta(seconds=verdict.lost_after)),
        )
    ).all()
    running = [r for r in running if only_runs is None or r.dag_run_id in only_runs]
    runs = {r.dag_run_id for r in running}
    if running:
        spared = transitions.spare_retry(
            conn, [(r.id, r.try_number) for r in running], requeues, now
        )
        lost = [
            _lost(
                r,
                now,
                f"its Celery worker {r.worker_name} stopped heartbeating through the broker "
                "(worker_lost_timeout): the worker died; the try is lost",
            )
            for r in running
        ]
        apply_executor_events(conn, lost, task_for, now, retry_now=spared)
    resend = _taken_by(conn, verdict, now, only_runs, own_job_id, job_heartbeat_seconds)
    return WorkerLosses(runs, len(running), resend)


def _taken_by(
    conn: Connection,
    verdict: WorkerVerdict,
    now: datetime,
    only_runs: Collection[int] | None,
    own_job_id: int,
    job_heartbeat_seconds: float,
) -> list[int]:
    """Queued tries a lost worker may hold, that this scheduler sent (or a dead one did)."""
    if not verdict.lost:
        return []
    live = jobs.live_job_ids(conn, "scheduler", now, job_heartbeat_seconds) - {own_job_id}
    rows = conn.execute(
        select(TaskInstance.id, TaskInstance.dag_run_id, TaskInstance.queued_by_job_id).where(
            TaskInstance.state == TIS.QUEUED,
            TaskInstance.queued_at <= max(verdict.lost.values()),
        )
    ).all()
    return sorted(
        r.id
        for r in rows
        if r.queued_by_job_id not in live and (only_runs is None or r.dag_run_id in only_runs)
    )


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
