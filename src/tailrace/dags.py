"""Reading DAGs and import errors as the CLI and the API show them."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, func, select

from tailrace.db.models import Dag, DagRun, ImportError_
from tailrace.store import deadlines


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def list_dags(
    conn: Connection,
    *,
    dag_id: str | None = None,
    after: str | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """Active DAGs by id (``after`` one, at most ``limit``), with their latest run's state."""
    q = select(Dag).where(Dag.is_active.is_(True)).order_by(Dag.dag_id)
    if dag_id is not None:
        q = q.where(Dag.dag_id == dag_id)
    if after is not None:
        q = q.where(Dag.dag_id > after)
    if limit is not None:
        q = q.limit(limit)
    dags = conn.execute(q).all()
    latest_ids = (
        select(func.max(DagRun.id))
        .where(DagRun.dag_id.in_([d.dag_id for d in dags]))
        .group_by(DagRun.dag_id)
    )
    latest = dict(
        conn.execute(select(DagRun.dag_id, DagRun.state).where(DagRun.id.in_(latest_ids))).all()
    )
    return [
        {
            "dag_id": d.dag_id,
            "schedule": d.schedule_description,
            "paused": d.is_paused,
            "next_run": _iso(d.next_dagrun),
            "latest_run_state": latest.get(d.dag_id),
            "fileloc": d.fileloc,
            "description": d.description,
            "tags": list(d.tags or []),
            "max_active_runs": d.max_active_runs,
            "last_parsed_at": _iso(d.last_parsed_at),
        }
        for d in dags
    ]


def import_errors(
    conn: Connection, *, after: int | None = None, limit: int | None = None
) -> list[dict[str, Any]]:
    """Files that failed to import, by id (the CLI sorts them by file name)."""
    q = select(ImportError_).order_by(ImportError_.id)
    if after is not None:
        q = q.where(ImportError_.id > after)
    if limit is not None:
        q = q.limit(limit)
    return [
        {
            "id": e.id,
            "filename": e.filename,
            "line": e.line,
            "dag_id": e.dag_id,
            "task_id": e.task_id,
            "message": e.message,
            "stacktrace": e.stacktrace,
            "timestamp": _iso(e.timestamp),
        }
        for e in conn.execute(q)
    ]


def list_runs(
    conn: Connection, dag_id: str, *, state: str | None = None, limit: int = 100
) -> list[dict[str, Any]]:
    """The DAG's runs, newest first (Airflow's ``dags list-runs``), with their run type
    (scheduled, manual, asset_triggered, backfill), backfill, and how many deadlines
    (deadline alerts) each missed."""
    query = select(DagRun).where(DagRun.dag_id == dag_id)
    if state is not None:
        query = query.where(DagRun.state == state)
    rows = conn.execute(query.order_by(DagRun.id.desc()).limit(limit)).all()
    missed = deadlines.missed_counts(conn, [r.id for r in rows])
    return [
        {
            "dag_id": r.dag_id,
            "run_id": r.run_id,
            "run_type": r.run_type,
            "state": r.state,
            "logical_date": _iso(r.logical_date),
            "start_date": _iso(r.start_date),
            "end_date": _iso(r.end_date),
            "backfill_id": r.backfill_id,
            "missed_deadlines": missed.get(r.id, 0),
        }
        for r in rows
    ]
