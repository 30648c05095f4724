"""Asset-triggered runs: a DAG scheduled on assets runs when its condition holds over the
events queued for it; the run records those events and takes them off the queue."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Connection, bindparam, delete, func, insert, select

from tailrace.assets import condition_lookups, evaluate
from tailrace.dagrun import create_dag_run, run_id_for
from tailrace.db.models import AssetDagRunQueue, Dag, DagRun, DagRunAssetEvent
from tailrace.errors import RunExistsError
from tailrace.serialization import SerializedDag
from tailrace.state import DagRunState, RunType

log = logging.getLogger(__name__)


@dataclass
class AssetRuns:
    """What one look at the queued asset events did: runs created, and the DAGs whose
    satisfied condition waits for ``max_active_runs`` (a run of theirs ending frees it)."""

    created: int = 0
    held_back: set[str] = field(default_factory=set)


_ACTIVE_RUNS = (
    select(func.count())
    .select_from(DagRun)
    .where(
        DagRun.dag_id == Dag.dag_id,
        DagRun.state.in_([DagRunState.QUEUED, DagRunState.RUNNING]),
    )
    .correlate(Dag)
    .scalar_subquery()
    .label("active")
)

# Built once: unpaused DAGs with events queued for them, with their active runs.
_QUEUED_DAGS = (
    select(Dag.dag_id, Dag.latest_version_id, Dag.max_active_runs, _ACTIVE_RUNS)
    .where(
        Dag.dag_id.in_(select(AssetDagRunQueue.target_dag_id).distinct()),
        Dag.is_paused.is_(False),
        Dag.is_active.is_(True),
        Dag.latest_version_id.is_not(None),
    )
    # Another scheduler creating this DAG's runs holds its row: leave the DAG to it.
    .with_for_update(skip_locked=True, key_share=True)
)
_PENDING = select(AssetDagRunQueue.event_id, AssetDagRunQueue.asset_id).where(
    AssetDagRunQueue.target_dag_id == bindparam("dag_id")
)


def create_asset_triggered_runs(
    conn: Connection,
    now: datetime,
    dag_for_version: Callable[[int], SerializedDag],
    asset_ids: dict[str, int] | None = None,
) -> AssetRuns:
    """Create a run for each DAG whose asset condition the queued events satisfy, as
    ``max_active_runs`` allows (the events wait otherwise). ``asset_ids`` (names to ids,
    filled as found: an asset is never deleted) spares looking them up each time."""
    queued = conn.execute(_QUEUED_DAGS).all()
    result = AssetRuns()
    for row in queued:
        dag = dag_for_version(row.latest_version_id)
        pending = conn.execute(_PENDING, {"dag_id": row.dag_id}).all()
        cond = dag.schedule.condition
        if dag.schedule.kind != "asset" or cond is None:
            # No longer scheduled on assets (a new version): nothing will consume these.
            _dequeue(conn, row.dag_id, [p.event_id for p in pending])
            continue
        ids, aliases = condition_lookups(conn, cond, asset_ids)
        if not evaluate(cond, {p.asset_id for p in pending}, ids, aliases):
            continue
        if row.active >= row.max_active_runs:
            # The events stay queued: the next free slot runs for all of them.
            result.held_back.add(row.dag_id)
            continue
        run_id, dag_run_id = _create_run(conn, dag, row.latest_version_id, now)
        events = sorted({p.event_id for p in pending})
        conn.execute(
            insert(DagRunAssetEvent), [{"dag_run_id": dag_run_id, "event_id": e} for e in events]
        )
        _dequeue(conn, row.dag_id, events)
        log.info(
            "created asset-triggered run %s of %s for %d events", run_id, row.dag_id, len(events)
        )
        result.created += 1
    return result


def _dequeue(conn: Connection, dag_id: str, event_ids: list[int]) -> None:
    if event_ids:
        conn.execute(
            delete(AssetDagRunQueue).where(
                AssetDagRunQueue.target_dag_id == dag_id, AssetDagRunQueue.event_id.in_(event_ids)
            )
        )


def _create_run(
    conn: Connection, dag: SerializedDag, version_id: int, now: datetime
) -> tuple[str, int]:
    """A queued run ``asset_triggered__<now>``, with a suffix when a run of this instant
    exists already; its run id and id."""
    base = run_id_for(RunType.ASSET_TRIGGERED, now)
    run_id, n = base, 1
    while True:
        try:
            created = create_dag_run(
                conn, dag, version_id, run_type=RunType.ASSET_TRIGGERED, now=now, run_id=run_id
            )
        except RunExistsError:  # raised before anything is written
            n += 1
            run_id = f"{base}.{n}"
        else:
            return run_id, created
