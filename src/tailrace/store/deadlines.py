"""Deadline rows (Airflow 3.1's deadline alerts, ADR 0037): created with a run (those
counted from its queue time again each time it is queued), deleted when it finishes in
time, taken by the scheduler once missed and handed on — to a worker as a
``dag_callback`` row, or to the triggerer as a one-shot trigger whose end is written back
here.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, ScalarSelect, delete, func, insert, select, update

from tailrace.db.models import DagCallback, DagRun, Deadline
from tailrace.serialization import SerializedDag, SerializedDeadline

log = logging.getLogger(__name__)

# trigger.consumer of an AsyncCallback's trigger: nobody consumes its events but this
# module, in the triggerer's write.
DEADLINE_CONSUMER = "deadline"
QUEUED, SUCCESS, FAILED = "queued", "success", "failed"


# -- created and cancelled with their runs -----------------------------------------------


def create_for_run(
    conn: Connection,
    dag: SerializedDag,
    dag_run_id: int,
    *,
    logical_date: datetime | None,
    now: datetime,
    queued_only: bool = False,
) -> None:
    """The run's deadlines, its DAG's alerts evaluated at ``now`` (the run's creation, or
    with ``queued_only`` its queueing again: only the alerts counted from the queue time,
    replacing their pending deadlines)."""
    if not dag.deadlines:
        return
    if queued_only:
        queued = [i for i, a in enumerate(dag.deadlines) if a.counts_from_queued]
        conn.execute(
            delete(Deadline).where(
                Deadline.dag_run_id == dag_run_id,
                Deadline.missed.is_(False),
                Deadline.alert_index.in_(queued),
            )
        )
    rows = []
    for index, alert in enumerate(dag.deadlines):
        if queued_only and not alert.counts_from_queued:
            continue
        reference = _reference_time(conn, dag.dag_id, alert, logical_date, now)
        if reference is None:
            continue
        rows.append(
            {
                "dag_run_id": dag_run_id,
                "alert_index": index,
                "name": alert.name,
                "deadline_time": reference + timedelta(seconds=alert.interval),
                "missed": False,
                "created_at": now,
            }
        )
    if rows:
        conn.execute(insert(Deadline), rows)


def _reference_time(
    conn: Connection,
    dag_id: str,
    alert: SerializedDeadline,
    logical_date: datetime | None,
    now: datetime,
) -> datetime | None:
    if alert.reference == "DagRunQueuedAtDeadline":
        return now
    if alert.reference == "DagRunLogicalDateDeadline":
        return logical_date
    if alert.reference == "FixedDatetimeDeadline":
        return alert.fixed
    assert alert.reference == "AverageRuntimeDeadline", alert.reference
    return _after_average_runtime(conn, dag_id, alert, now)


def _after_average_runtime(
    conn: Connection, dag_id: str, alert: SerializedDeadline, now: datetime
) -> datetime | None:
    """``now`` plus the mean duration of the DAG's latest ``max_runs`` finished runs (by
    logical date, as Airflow does); None with fewer than ``min_runs`` of them."""
    rows = conn.execute(
        select(DagRun.start_date, DagRun.end_date)
        .where(
            DagRun.dag_id == dag_id,
            DagRun.start_date.is_not(None),
            DagRun.end_date.is_not(None),
        )
        .order_by(DagRun.logical_date.desc(), DagRun.id.desc())
        .limit(alert.max_runs or 10)
    ).all()
    if len(rows) < (alert.min_runs or 1):
        log.info(
            "DAG %s has %d finished runs, AVERAGE_RUNTIME needs %d: this run gets no deadline",
            dag_id,
            len(rows),
            alert.min_runs,
        )
        return None
    seconds = sum((r.end_date - r.start_date).total_seconds() for r in rows) / len(rows)
    return now + timedelta(seconds=seconds)


def cancel(conn: Connection, dag_run_ids: Collection[int], now: datetime) -> None:
    """The runs finished at ``now``: their deadlines still ahead will not be missed. One
    already past and not yet taken (the scheduler had not looked) was missed: it stays."""
    if dag_run_ids:
        conn.execute(
            delete(Deadline).where(
                Deadline.dag_run_id.in_(list(dag_run_ids)),
                Deadline.missed.is_(False),
                Deadline.deadline_time > now,
            )
        )


# -- the scheduler's side ---------------------------------------------------------------


def earliest(only_runs: Collection[int] | None = None) -> ScalarSelect[datetime]:
    """When the next deadline (of ``only_runs``, if given) passes: a scalar subquery of
    the scheduler's timer query."""
    query = select(func.min(Deadline.deadline_time)).where(Deadline.missed.is_(False))
    if only_runs is not None:
        query = query.where(Deadline.dag_run_id.in_(list(only_runs)))
    return query.scalar_subquery()


_MISSED_RUN_COLUMNS = (
    DagRun.dag_id,
    DagRun.run_id,
    DagRun.dag_version_id,
    DagRun.state,
    DagRun.run_type,
    DagRun.logical_date,
    DagRun.queued_at,
    DagRun.start_date,
    DagRun.end_date,
    DagRun.conf,
)


def take_missed(
    conn: Connection, now: datetime, only_runs: Collection[int] | None = None, limit: int = 100
) -> Sequence[Any]:
    """Deadlines passed at ``now`` and not yet missed, with their runs, marked missed: the
    caller hands their callbacks on in the same transaction (so each is handed on once,
    whichever scheduler takes it, and whatever happens to the scheduler after)."""
    query = (
        select(
            Deadline.id,
            Deadline.dag_run_id,
            Deadline.alert_index,
            Deadline.name,
            Deadline.deadline_time,
            *_MISSED_RUN_COLUMNS,
        )
        .join(DagRun, DagRun.id == Deadline.dag_run_id)
        .where(Deadline.missed.is_(False), Deadline.deadline_time <= now)
        .order_by(Deadline.deadline_time, Deadline.id)
        .limit(limit)
        .with_for_update(of=Deadline, skip_locked=True)
    )
    if only_runs is not None:
        query = query.where(Deadline.dag_run_id.in_(list(only_runs)))
    rows = conn.execute(query).all()
    if rows:
        conn.execute(
            update(Deadline)
            .where(Deadline.id.in_([r.id for r in rows]))
            .values(missed=True, missed_at=now)
        )
    return rows


def handed_to_worker(conn: Connection, deadline_id: int, dag_callback_id: int) -> None:
    conn.execute(
        update(Deadline).where(Deadline.id == deadline_id).values(dag_callback_id=dag_callback_id)
    )


def handed_to_triggerer(conn: Connection, deadline_id: int, trigger_id: int) -> None:
    conn.execute(
        update(Deadline)
        .where(Deadline.id == deadline_id)
        .values(trigger_id=trigger_id, callback_state=QUEUED)
    )


def context(row: Any) -> dict[str, Any]:
    """What the callback gets as ``context``, as Airflow 3.1 gives it: the run as the REST
    API shows it, and the deadline (id, moment, the alert's name)."""
    return {
        "dag_run": {
            "dag_id": row.dag_id,
            "run_id": row.run_id,
            "state": row.state,
            "run_type": row.run_type,
            "logical_date": _iso(row.logical_date),
            "queued_at": _iso(row.queued_at),
            "start_date": _iso(row.start_date),
            "end_date": _iso(row.end_date),
            "conf": row.conf or {},
        },
        "deadline": {
            "id": str(row.id),
            "deadline_time": _iso(row.deadline_time),
            "name": row.name,
        },
    }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def of_callbacks(conn: Connection, callback_ids: Collection[int]) -> dict[int, Any]:
    """The missed deadlines (with their runs) whose callbacks are these ``dag_callback``
    rows, by callback id: what a worker needs to call them."""
    if not callback_ids:
        return {}
    rows = conn.execute(
        select(
            Deadline.id,
            Deadline.dag_callback_id,
            Deadline.alert_index,
            Deadline.name,
            Deadline.deadline_time,
            *_MISSED_RUN_COLUMNS,
        )
        .join(DagRun, DagRun.id == Deadline.dag_run_id)
        .where(Deadline.dag_callback_id.in_(list(callback_ids)))
    ).all()
    return {r.dag_callback_id: r for r in rows}


# -- the triggerer's side -----------------------------------------------------------------


def record_async_outcomes(
    conn: Connection, outcomes: Sequence[tuple[int, bool, str | None]]
) -> None:
    """AsyncCallbacks' ends, ``(trigger id, ok, error)``: written with their triggers' events."""
    for trigger_id, ok, error in outcomes:
        conn.execute(
            update(Deadline)
            .where(Deadline.trigger_id == trigger_id, Deadline.callback_state == QUEUED)
            .values(callback_state=SUCCESS if ok else FAILED, callback_error=error)
        )


# -- for people ---------------------------------------------------------------------------


def of_run(conn: Connection, dag_run_id: int) -> list[dict[str, Any]]:
    """The run's deadlines, soonest first: pending, or missed with their callback's state
    (pending → queued → success | failed)."""
    rows = conn.execute(
        select(
            Deadline.name,
            Deadline.deadline_time,
            Deadline.missed,
            Deadline.missed_at,
            Deadline.trigger_id,
            func.coalesce(DagCallback.state, Deadline.callback_state).label("callback_state"),
            func.coalesce(DagCallback.error, Deadline.callback_error).label("callback_error"),
        )
        .outerjoin(DagCallback, DagCallback.id == Deadline.dag_callback_id)
        .where(Deadline.dag_run_id == dag_run_id)
        .order_by(Deadline.deadline_time, Deadline.id)
    ).all()
    return [
        {
            "name": r.name,
            "deadline_time": r.deadline_time,
            "missed": r.missed,
            "missed_at": r.missed_at,
            "callback": None if not r.missed else ("async" if r.trigger_id else "sync"),
            "callback_state": r.callback_state,
            "callback_error": r.callback_error,
        }
        for r in rows
    ]


def missed_counts(conn: Connection, dag_run_ids: Collection[int]) -> dict[int, int]:
    """How many deadlines each of the runs missed (those with any)."""
    if not dag_run_ids:
        return {}
    return dict(
        conn.execute(
            select(Deadline.dag_run_id, func.count())
            .where(Deadline.dag_run_id.in_(list(dag_run_ids)), Deadline.missed.is_(True))
            .group_by(Deadline.dag_run_id)
        ).all()
    )
