"""Backfills' rows: the backfill, its logical dates (the run each got, or why none), and
whether it is still going. A backfill is complete when cancelled (``completed_at`` set)
or once none of its runs is queued or running; that is worked out when read, so the
scheduler keeps no books for it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, func, insert, select, true, update

from tailrace.db.models import Backfill, BackfillDagRun, Dag, DagRun
from tailrace.state import DagRunState, RunType

_ACTIVE = (DagRunState.QUEUED, DagRunState.RUNNING)


@dataclass(frozen=True)
class BackfillRow:
    """A backfill as Airflow 3's API returns it."""

    id: int
    dag_id: str
    from_date: datetime
    to_date: datetime
    dag_run_conf: dict[str, Any]
    is_paused: bool
    reprocess_behavior: str
    max_active_runs: int
    created_at: datetime
    completed_at: datetime | None
    updated_at: datetime
    triggering_user_name: str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "dag_id": self.dag_id,
            "from_date": self.from_date.isoformat(),
            "to_date": self.to_date.isoformat(),
            "dag_run_conf": self.dag_run_conf,
            "is_paused": self.is_paused,
            "reprocess_behavior": self.reprocess_behavior,
            "max_active_runs": self.max_active_runs,
            "created_at": self.created_at.isoformat(),
            "completed_at": self.completed_at.isoformat() if self.completed_at else None,
            "updated_at": self.updated_at.isoformat(),
        }


@dataclass(frozen=True)
class ExistingRun:
    """The run a DAG already has for a logical date."""

    id: int
    run_id: str
    state: str


def _rows(conn: Connection, where: Any) -> list[BackfillRow]:
    rows = conn.execute(select(Backfill).where(where).order_by(Backfill.id)).all()
    if not rows:
        return []
    ids = [r.id for r in rows]
    # Per backfill: does it still have a run to start or finish, and when its last ended.
    unfinished = set(
        conn.scalars(
            select(DagRun.backfill_id)
            .where(DagRun.backfill_id.in_(ids), DagRun.state.in_(_ACTIVE))
            .group_by(DagRun.backfill_id)
        )
    )
    ended = dict(
        conn.execute(
            select(DagRun.backfill_id, func.max(DagRun.end_date))
            .where(DagRun.backfill_id.in_(ids))
            .group_by(DagRun.backfill_id)
        ).all()
    )
    out = []
    for r in rows:
        completed = r.completed_at
        if completed is None and r.id not in unfinished:
            completed = ended.get(r.id) or r.created_at
        out.append(
            BackfillRow(
                id=r.id,
                dag_id=r.dag_id,
                from_date=r.from_date,
                to_date=r.to_date,
                dag_run_conf=dict(r.dag_run_conf or {}),
                is_paused=bool(r.is_paused),
                reprocess_behavior=r.reprocess_behavior,
                max_active_runs=r.max_active_runs,
                created_at=r.created_at,
                completed_at=completed,
                updated_at=r.updated_at,
                triggering_user_name=r.triggering_user_name,
            )
        )
    return out


def get(conn: Connection, backfill_id: int) -> BackfillRow | None:
    found = _rows(conn, Backfill.id == backfill_id)
    return found[0] if found else None


def listed(conn: Connection, dag_id: str | None) -> list[BackfillRow]:
    """The DAG's backfills (None: every DAG's), oldest first."""
    return _rows(conn, Backfill.dag_id == dag_id if dag_id is not None else true())


def active_for_dag(conn: Connection, dag_id: str) -> BackfillRow | None:
    """The DAG's backfill that is not complete (Airflow allows one at a time)."""
    candidates = _rows(conn, (Backfill.dag_id == dag_id) & Backfill.completed_at.is_(None))
    return next((b for b in candidates if b.completed_at is None), None)


def lock_dag(conn: Connection, dag_id: str) -> bool:
    """Hold the DAG's row for this transaction (two backfills created at once for one DAG
    are then one after the other); False if there is no such DAG."""
    return conn.scalar(select(Dag.dag_id).where(Dag.dag_id == dag_id).with_for_update()) is not None


def insert_backfill(
    conn: Connection,
    *,
    dag_id: str,
    from_date: datetime,
    to_date: datetime,
    dag_run_conf: Mapping[str, Any],
    reprocess_behavior: str,
    max_active_runs: int,
    triggering_user_name: str | None,
    now: datetime,
) -> int:
    backfill_id: int = conn.execute(
        insert(Backfill)
        .values(
            dag_id=dag_id,
            from_date=from_date,
            to_date=to_date,
            dag_run_conf=dict(dag_run_conf),
            is_paused=False,
            reprocess_behavior=reprocess_behavior,
            max_active_runs=max_active_runs,
            created_at=now,
            updated_at=now,
            triggering_user_name=triggering_user_name,
        )
        .returning(Backfill.id)
    ).scalar_one()
    return backfill_id


def existing_run(conn: Connection, dag_id: str, logical_date: datetime) -> ExistingRun | None:
    """The DAG's run for ``logical_date`` (the latest started, as Airflow picks it)."""
    row = conn.execute(
        select(DagRun.id, DagRun.run_id, DagRun.state)
        .where(DagRun.dag_id == dag_id, DagRun.logical_date == logical_date)
        .order_by(DagRun.start_date.is_(None), DagRun.start_date.desc(), DagRun.id.desc())
        .limit(1)
    ).first()
    return ExistingRun(row.id, row.run_id, row.state) if row is not None else None


def adopt_run(conn: Connection, dag_run_id: int, backfill_id: int, conf: Mapping[str, Any]) -> None:
    """A reprocessed run now belongs to the backfill: a backfill run, with its conf."""
    conn.execute(
        update(DagRun)
        .where(DagRun.id == dag_run_id)
        .values(backfill_id=backfill_id, run_type=RunType.BACKFILL.value, conf=dict(conf))
    )


def record_dates(conn: Connection, backfill_id: int, dates: Sequence[dict[str, Any]]) -> None:
    """Each logical date's outcome: ``logical_date``, ``sort_ordinal`` and ``dag_run_id``
    or ``exception_reason``."""
    if dates:
        conn.execute(insert(BackfillDagRun), [{"backfill_id": backfill_id, **d} for d in dates])


def set_paused(conn: Connection, backfill_id: int, paused: bool, now: datetime) -> None:
    conn.execute(
        update(Backfill).where(Backfill.id == backfill_id).values(is_paused=paused, updated_at=now)
    )


def queued_runs(conn: Connection, backfill_id: int) -> list[int]:
    return list(
        conn.scalars(
            select(DagRun.id).where(
                DagRun.backfill_id == backfill_id, DagRun.state == DagRunState.QUEUED
            )
        )
    )


def set_completed(conn: Connection, backfill_id: int, now: datetime) -> None:
    conn.execute(
        update(Backfill).where(Backfill.id == backfill_id).values(completed_at=now, updated_at=now)
    )


def dates(conn: Connection, backfill_id: int) -> list[dict[str, Any]]:
    """The backfill's logical dates in its order, each with its run (id, state) or the
    reason it has none."""
    rows = conn.execute(
        select(
            BackfillDagRun.logical_date,
            BackfillDagRun.sort_ordinal,
            BackfillDagRun.exception_reason,
            DagRun.run_id,
            DagRun.state,
        )
        .outerjoin(DagRun, DagRun.id == BackfillDagRun.dag_run_id)
        .where(BackfillDagRun.backfill_id == backfill_id)
        .order_by(BackfillDagRun.sort_ordinal)
    ).all()
    return [
        {
            "logical_date": r.logical_date.isoformat(),
            "sort_ordinal": r.sort_ordinal,
            "run_id": r.run_id,
            "state": r.state,
            "exception_reason": r.exception_reason,
        }
        for r in rows
    ]
