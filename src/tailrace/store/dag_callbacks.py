"""Callback rows: recorded when a run finishes, or a try ends without a worker (in
`tailrace.transitions`), handed to a worker by the scheduler, and closed with what the
worker reported.

pending → queued (handed to an executor) → success | failed, reported by a local worker
through its scheduler or by a Celery worker through the execution API. A local
executor's workers die with their scheduler: what a stopped scheduler had queued goes
back to pending, so a callback runs at least once (ADR 0034).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, func, insert, select, update

from tailrace.db.models import DagCallback, DagRun, TaskInstance

PENDING, QUEUED, SUCCESS, FAILED = "pending", "queued", "success", "failed"
# The reason of a task's callback row: its try ended where no worker could call it.
TASK_REASON = "ended_without_worker"


def record(conn: Connection, dag_run_id: int, kind: str, reason: str, now: datetime) -> None:
    conn.execute(
        insert(DagCallback).values(
            dag_run_id=dag_run_id, kind=kind, reason=reason, state=PENDING, created_at=now
        )
    )


def record_task(
    conn: Connection,
    dag_run_id: int,
    ti_id: int,
    try_number: int,
    kind: str,
    error: str | None,
    now: datetime,
) -> None:
    """A task's ``on_<kind>_callback`` for a try that ended without a worker (ADR 0033)."""
    conn.execute(
        insert(DagCallback).values(
            dag_run_id=dag_run_id,
            kind=kind,
            reason=TASK_REASON,
            state=PENDING,
            created_at=now,
            task_instance_id=ti_id,
            try_number=try_number,
            task_error=error,
        )
    )


def take_pending(
    conn: Connection,
    now: datetime,
    job_id: int,
    only_runs: Collection[int] | None = None,
    limit: int = 100,
) -> Sequence[Any]:
    """Pending callbacks with their runs (of ``only_runs``, if given), marked queued by the
    scheduler ``job_id``: it hands them over."""
    query = (
        select(
            DagCallback.id,
            DagCallback.kind,
            DagCallback.reason,
            DagRun.id.label("dag_run_id"),
            DagRun.dag_id,
            DagRun.run_id,
            DagRun.dag_version_id,
            DagRun.run_type,
            DagRun.logical_date,
            DagRun.data_interval_start,
            DagRun.data_interval_end,
            DagRun.start_date,
            DagRun.conf,
            DagCallback.task_instance_id,
            DagCallback.try_number,
            DagCallback.task_error,
            TaskInstance.task_id,
            TaskInstance.map_index,
            TaskInstance.max_tries,
        )
        .join(DagRun, DagRun.id == DagCallback.dag_run_id)
        .outerjoin(TaskInstance, TaskInstance.id == DagCallback.task_instance_id)
        .where(DagCallback.state == PENDING)
        .order_by(DagCallback.id)
        .limit(limit)
        # Several schedulers: each callback is handed over by one of them.
        .with_for_update(of=DagCallback, skip_locked=True)
    )
    if only_runs is not None:
        query = query.where(DagCallback.dag_run_id.in_(list(only_runs)))
    rows = conn.execute(query).all()
    if rows:
        conn.execute(
            update(DagCallback)
            .where(DagCallback.id.in_([r.id for r in rows]))
            .values(state=QUEUED, queued_at=now, queued_by_job_id=job_id)
        )
    return rows


def requeue_orphaned(
    conn: Connection, live_job_ids: Collection[int], only_runs: Collection[int] | None
) -> set[int]:
    """Queued callbacks whose scheduler is not among ``live_job_ids`` go back to pending:
    its local workers died with it, before their end was heard (they may have run: a
    callback runs at least once). The runs they belong to."""
    owner = DagCallback.queued_by_job_id
    query = select(DagCallback.id, DagCallback.dag_run_id).where(
        DagCallback.state == QUEUED, owner.is_(None) | owner.not_in(list(live_job_ids))
    )
    if only_runs is not None:
        query = query.where(DagCallback.dag_run_id.in_(list(only_runs)))
    rows = conn.execute(query).all()
    if rows:
        conn.execute(
            update(DagCallback)
            .where(DagCallback.id.in_([r.id for r in rows]), DagCallback.state == QUEUED)
            .values(state=PENDING, queued_at=None, queued_by_job_id=None)
        )
    return {r.dag_run_id for r in rows}


def finish(conn: Connection, callback_id: int, ok: bool, error: str | None, now: datetime) -> None:
    conn.execute(
        update(DagCallback)
        .where(DagCallback.id == callback_id, DagCallback.state == QUEUED)
        .values(state=SUCCESS if ok else FAILED, error=error, finished_at=now)
    )


def get(conn: Connection, callback_id: int) -> Any:
    """The row's state and run, or None."""
    return conn.execute(
        select(DagCallback.id, DagCallback.state, DagCallback.dag_run_id).where(
            DagCallback.id == callback_id
        )
    ).first()


def unfinished(conn: Connection, dag_run_id: int) -> int:
    """The run's DAG callbacks not yet run to their end (pending or queued)."""
    return int(
        conn.scalar(
            select(func.count())
            .select_from(DagCallback)
            .where(DagCallback.dag_run_id == dag_run_id, DagCallback.state.in_([PENDING, QUEUED]))
        )
        or 0
    )


# The kind and reason of a missed deadline's SyncCallback row (ADR 0037).
DEADLINE_KIND, DEADLINE_REASON = "deadline", "deadline_missed"


def record_deadline(conn: Connection, dag_run_id: int, now: datetime) -> int:
    """A missed deadline's SyncCallback, for a worker to call; returns the row's id (the
    deadline row points at it)."""
    callback_id: int = conn.execute(
        insert(DagCallback)
        .values(
            dag_run_id=dag_run_id,
            kind=DEADLINE_KIND,
            reason=DEADLINE_REASON,
            state=PENDING,
            created_at=now,
        )
        .returning(DagCallback.id)
    ).scalar_one()
    return callback_id
