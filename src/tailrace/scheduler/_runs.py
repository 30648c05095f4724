"""DAG runs: creating the scheduled ones that are due, starting queued ones.

Both respect ``max_active_runs``, also with several schedulers (each locks the DAG rows it
works on, skipping those another holds); both are pure database work on serialized DAGs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Connection, func, select, update

from tailrace import transitions
from tailrace.dagrun import create_dag_run
from tailrace.db.models import Backfill, BackfillDagRun, Dag, DagRun
from tailrace.scheduler.schedules import next_scheduled
from tailrace.serialization import SerializedDag
from tailrace.state import DagRunState, RunType

log = logging.getLogger(__name__)


def create_scheduled_runs(
    conn: Connection, now: datetime, dag_for_version: Callable[[int], SerializedDag]
) -> set[str]:
    """Create the due scheduled run of each unpaused DAG that has room for one; returns the
    DAGs whose due run waits for ``max_active_runs`` (a run of theirs ending frees it)."""
    due = conn.execute(
        select(Dag.dag_id, Dag.next_dagrun, Dag.latest_version_id, Dag.max_active_runs)
        .where(
            Dag.is_paused.is_(False),
            Dag.is_active.is_(True),
            Dag.next_dagrun <= now,
            Dag.latest_version_id.is_not(None),
        )
        # Another scheduler creating this DAG's run holds its row: leave the DAG to it.
        .with_for_update(skip_locked=True, key_share=True)
    ).all()
    held_back: set[str] = set()
    for row in due:
        active = conn.scalar(
            select(func.count())
            .select_from(DagRun)
            .where(
                DagRun.dag_id == row.dag_id,
                DagRun.state.in_([DagRunState.QUEUED, DagRunState.RUNNING]),
                # A backfill's runs count against the backfill's limit, not the DAG's.
                DagRun.backfill_id.is_(None),
            )
        )
        if (active or 0) >= row.max_active_runs:
            held_back.add(row.dag_id)
            continue
        dag = dag_for_version(row.latest_version_id)
        # Recomputed from the last run, so a DAG without catchup that was paused or held
        # back runs only its latest due moment, not the stale stored one.
        last = conn.scalar(
            select(func.max(DagRun.logical_date)).where(
                DagRun.dag_id == row.dag_id, DagRun.run_type == RunType.SCHEDULED
            )
        )
        logical_date = next_scheduled(dag, last, now)
        if logical_date is not None and logical_date <= now:
            create_dag_run(
                conn,
                dag,
                row.latest_version_id,
                run_type=RunType.SCHEDULED,
                now=now,
                logical_date=logical_date,
            )
            log.info("created scheduled run of %s for %s", row.dag_id, logical_date)
            logical_date = next_scheduled(dag, logical_date, now)
        conn.execute(update(Dag).where(Dag.dag_id == row.dag_id).values(next_dagrun=logical_date))
    return held_back


# Built once (a statement's construction and cache key cost more than SQLite running it):
# queued runs in the order they start, with the limit each counts against.
_QUEUED_RUNS = (
    select(
        DagRun.id,
        DagRun.dag_id,
        DagRun.backfill_id,
        func.coalesce(Backfill.max_active_runs, Dag.max_active_runs).label("limit"),
    )
    .join(Dag, Dag.dag_id == DagRun.dag_id)
    .outerjoin(Backfill, Backfill.id == DagRun.backfill_id)
    .outerjoin(
        BackfillDagRun,
        (BackfillDagRun.dag_run_id == DagRun.id)
        & (BackfillDagRun.backfill_id == DagRun.backfill_id),
    )
    .where(
        DagRun.state == DagRunState.QUEUED,
        Backfill.is_paused.is_not(True),
    )
    .order_by(BackfillDagRun.sort_ordinal.is_not(None), BackfillDagRun.sort_ordinal)
    .order_by(DagRun.queued_at, DagRun.id)
    # One scheduler at a time starts a DAG's runs, so max_active_runs holds.
    .with_for_update(of=Dag, skip_locked=True, key_share=True)
)
_RUNNING_COUNTS = (
    select(DagRun.dag_id, DagRun.backfill_id, func.count())
    .where(DagRun.state == DagRunState.RUNNING)
    .group_by(DagRun.dag_id, DagRun.backfill_id)
)


@dataclass
class StartedRuns:
    """Runs started; DAGs with queued runs left waiting for ``max_active_runs``."""

    started: set[int] = field(default_factory=set)
    held_back: set[str] = field(default_factory=set)


def start_queued_runs(
    conn: Connection, now: datetime, only_runs: Collection[int] | None
) -> StartedRuns:
    """Start queued runs as ``max_active_runs`` allows.

    As in Airflow 3, a backfill's runs are limited by the backfill's ``max_active_runs``
    apart from the DAG's (which limits its other runs), wait while the backfill is
    paused, and start after the DAG's other queued runs, in the backfill's order.
    """
    queued = conn.execute(_QUEUED_RUNS).all()
    result = StartedRuns()
    if not queued:
        return result
    running: dict[tuple[str, int | None], int] = {
        (dag_id, backfill_id): count
        for dag_id, backfill_id, count in conn.execute(_RUNNING_COUNTS).all()
    }
    for row in queued:
        if only_runs is not None and row.id not in only_runs:
            continue
        key = (row.dag_id, row.backfill_id)
        if running.get(key, 0) >= row.limit:
            result.held_back.add(row.dag_id)
            continue
        running[key] = running.get(key, 0) + 1
        result.started.add(row.id)
    transitions.start_runs(conn, result.started, now)
    return result
