"""Backfills, as in Airflow 3: runs of a DAG for the logical dates its schedule has in a
range, created at once (queued, ``run_type`` backfill) through the ordinary run-creation
path; the scheduler starts them as the backfill's ``max_active_runs`` allows, apart from
the DAG's own limit, and in the backfill's order.

A date that already has a run is left alone, or that run is cleared and run again as
part of the backfill, as ``reprocess_behavior`` says: ``none`` (never), ``failed`` (if it
failed) or ``completed`` (if it finished, failed or not). A run still queued or running
is never touched. Nothing here runs user code: the DAG is its serialized version.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import Connection, Engine

from tailrace import transitions
from tailrace.dagrun import clear_task_instances, create_dag_run, latest_version, resolve_params
from tailrace.errors import (
    BackfillCompletedError,
    BackfillError,
    BackfillNotFoundError,
    BackfillRunningError,
    DagNotFoundError,
)
from tailrace.scheduler.schedules import next_run_date
from tailrace.serialization import SerializedDag
from tailrace.state import FINISHED_RUN_STATES, DagRunState, RunType
from tailrace.store import backfills as store
from tailrace.store.backfills import BackfillRow

# Airflow's default for a backfill's max_active_runs.
DEFAULT_MAX_ACTIVE_RUNS = 10


class ReprocessBehavior(StrEnum):
    """What a backfill does with a date that already has a finished run."""

    NONE = "none"
    FAILED = "failed"
    COMPLETED = "completed"


# Why a date got no run (Airflow's BackfillDagRunExceptionReason).
IN_FLIGHT = "in flight"
ALREADY_EXISTS = "already exists"


@dataclass(frozen=True)
class BackfillRequest:
    """What ``tailrace backfill create`` and ``POST /backfills`` ask for."""

    dag_id: str
    from_date: datetime
    to_date: datetime
    reprocess_behavior: ReprocessBehavior = ReprocessBehavior.NONE
    max_active_runs: int = DEFAULT_MAX_ACTIVE_RUNS
    run_backwards: bool = False
    dag_run_conf: Mapping[str, Any] | None = None


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def logical_dates(
    dag: SerializedDag, from_date: datetime, to_date: datetime, now: datetime
) -> list[datetime]:
    """The logical dates ``dag``'s schedule has from ``from_date`` to ``to_date``
    (both included) that are already past, oldest first."""
    dates: list[datetime] = []
    last: datetime | None = None
    while True:
        date = next_run_date(
            dag.schedule,
            start_date=from_date,
            end_date=to_date,
            catchup=True,
            last_logical_date=last,
            now=now,
            timezone=dag.timezone,
        )
        if date is None or date >= now:
            return dates
        dates.append(date)
        last = date


def _no_run_reason(state: str, behavior: ReprocessBehavior) -> str | None:
    """Why a date whose run is in ``state`` gets no run (None: it is run again)."""
    if state not in FINISHED_RUN_STATES:
        return IN_FLIGHT
    if behavior is ReprocessBehavior.NONE:
        return ALREADY_EXISTS
    if behavior is ReprocessBehavior.FAILED and state != DagRunState.FAILED:
        return ALREADY_EXISTS
    return None


def _validate(dag: SerializedDag, request: BackfillRequest, now: datetime) -> list[datetime]:
    """The request checked as Airflow checks it; returns its dates in the backfill's order."""
    if dag.schedule.kind not in ("cron", "delta"):
        raise BackfillError(
            f"DAG {dag.dag_id!r} has a non-periodic schedule "
            f"({dag.schedule.kind}) that does not support backfills.",
            hint="Backfill a DAG scheduled on a cron expression, a preset or a timedelta; "
            "trigger runs of this one with `tailrace dags trigger`.",
        )
    from_date, to_date = _aware(request.from_date), _aware(request.to_date)
    if from_date > to_date:
        raise BackfillError(
            f"from_date ({from_date.isoformat()}) must not be after to_date "
            f"({to_date.isoformat()})."
        )
    if from_date >= now and to_date >= now:
        raise BackfillError("Backfill cannot be executed for future dates.")
    if request.max_active_runs < 1:
        raise BackfillError(f"max_active_runs must be at least 1, not {request.max_active_runs}.")
    if any(t.depends_on_past for t in dag.tasks):
        if request.run_backwards:
            raise BackfillError(
                "Backfill cannot be run in reverse when the DAG has tasks where "
                "depends_on_past=True.",
                hint="Leave out --run-backwards (run_backwards).",
            )
        if request.reprocess_behavior is ReprocessBehavior.NONE:
            raise BackfillError(
                "DAG has tasks for which depends_on_past=True. You must set reprocess "
                "behavior to reprocess completed or reprocess failed.",
                hint="Pass --reprocess-behavior failed or completed.",
            )
    resolve_params(dag, dict(request.dag_run_conf or {}))
    dates = logical_dates(dag, from_date, to_date, now)
    if not dates:
        raise BackfillError(
            f"No runs to create for DAG {dag.dag_id!r}: its schedule has no logical date "
            f"from {from_date.isoformat()} to {to_date.isoformat()} that is past.",
        )
    return dates[::-1] if request.run_backwards else dates


def dry_run(engine: Engine, request: BackfillRequest, now: datetime) -> list[datetime]:
    """The logical dates a backfill would create (or reprocess) runs for now."""
    with engine.connect() as conn:
        _, dag = latest_version(conn, request.dag_id)
        dates = _validate(dag, request, now)
        return [
            date
            for date in dates
            if (run := store.existing_run(conn, dag.dag_id, date)) is None
            or _no_run_reason(run.state, request.reprocess_behavior) is None
        ]


def create_backfill(
    engine: Engine,
    request: BackfillRequest,
    now: datetime,
    *,
    triggering_user_name: str | None = None,
) -> BackfillRow:
    """Create the backfill and, in the same transaction, its runs: new queued runs for
    dates without one, cleared (queued again) runs where ``reprocess_behavior`` says so."""
    conf = dict(request.dag_run_conf or {})
    with engine.begin() as conn:
        if not store.lock_dag(conn, request.dag_id):
            raise DagNotFoundError(request.dag_id)
        version_id, dag = latest_version(conn, request.dag_id)
        if (running := store.active_for_dag(conn, dag.dag_id)) is not None:
            raise BackfillRunningError(dag.dag_id, running.id)
        dates = _validate(dag, request, now)
        backfill_id = store.insert_backfill(
            conn,
            dag_id=dag.dag_id,
            from_date=_aware(request.from_date),
            to_date=_aware(request.to_date),
            dag_run_conf=conf,
            reprocess_behavior=request.reprocess_behavior.value,
            max_active_runs=request.max_active_runs,
            triggering_user_name=triggering_user_name,
            now=now,
        )
        outcomes = [
            {
                "logical_date": date,
                "sort_ordinal": ordinal,
                **_run_for_date(
                    conn, dag, version_id, backfill_id, date, request.reprocess_behavior, conf, now
                ),
            }
            for ordinal, date in enumerate(dates, start=1)
        ]
        store.record_dates(conn, backfill_id, outcomes)
        row = store.get(conn, backfill_id)
    assert row is not None
    return row


def _run_for_date(
    conn: Connection,
    dag: SerializedDag,
    version_id: int,
    backfill_id: int,
    date: datetime,
    behavior: ReprocessBehavior,
    conf: dict[str, Any],
    now: datetime,
) -> dict[str, Any]:
    existing = store.existing_run(conn, dag.dag_id, date)
    if existing is None:
        pk = create_dag_run(
            conn,
            dag,
            version_id,
            run_type=RunType.BACKFILL,
            now=now,
            logical_date=date,
            conf=conf,
            backfill_id=backfill_id,
        )
        return {"dag_run_id": pk, "exception_reason": None}
    reason = _no_run_reason(existing.state, behavior)
    if reason is not None:
        return {"dag_run_id": None, "exception_reason": reason}
    # As Airflow: the whole run is cleared and queued again, now the backfill's.
    clear_task_instances(conn, existing.id, None, now)
    store.adopt_run(conn, existing.id, backfill_id, conf)
    return {"dag_run_id": existing.id, "exception_reason": None}


def get_backfill(engine: Engine, backfill_id: int) -> BackfillRow:
    with engine.connect() as conn:
        row = store.get(conn, backfill_id)
    if row is None:
        raise BackfillNotFoundError(backfill_id)
    return row


def _open(conn: Connection, backfill_id: int) -> BackfillRow:
    row = store.get(conn, backfill_id)
    if row is None:
        raise BackfillNotFoundError(backfill_id)
    if row.completed_at is not None:
        raise BackfillCompletedError(backfill_id)
    return row


def set_paused(engine: Engine, backfill_id: int, paused: bool, now: datetime) -> BackfillRow:
    """Pause (its queued runs wait; running ones go on) or unpause a backfill."""
    with engine.begin() as conn:
        _open(conn, backfill_id)
        store.set_paused(conn, backfill_id, paused, now)
        row = store.get(conn, backfill_id)
    assert row is not None
    return row


def cancel(engine: Engine, backfill_id: int, now: datetime) -> BackfillRow:
    """As Airflow: paused, its queued runs failed (those running finish), and complete."""
    with engine.begin() as conn:
        _open(conn, backfill_id)
        store.set_paused(conn, backfill_id, True, now)
        transitions.cancel_queued_runs(conn, store.queued_runs(conn, backfill_id), now)
        store.set_completed(conn, backfill_id, now)
        row = store.get(conn, backfill_id)
    assert row is not None
    return row
