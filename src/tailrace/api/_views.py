"""What the web UI's pages show, read with a few summarising queries.

A mapped task is summarised with ``GROUP BY state``: the grid of a run with 10,000 (or a
million) instances reads one row per task and state, never the instances themselves.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import msgspec
from sqlalchemy import Connection, func, select

from tailrace.api import models
from tailrace.api._rows import run_row, to_model
from tailrace.api.errors import NotFound
from tailrace.db.models import Dag, DagRun, DagVersion, TaskInstance
from tailrace.serialization import SerializedDag, SerializedTask, loads
from tailrace.streams import read_items, stream_summaries

# A mapped task shows the state that most needs attention among its instances.
_URGENCY = [
    "failed",
    "upstream_failed",
    "up_for_retry",
    "running",
    "deferred",
    "queued",
    "scheduled",
    "none",
    "removed",
    "success",
    "skipped",
]
LATEST_ITEMS = 5
RECENT_RUNS = 12

# Serialized DAG versions never change: decode each once.
_structures: dict[int, models.DagStructure] = {}
_structures_lock = threading.Lock()
_MAX_CACHED = 256


def summary_state(counts: dict[str, int]) -> str | None:
    for state in _URGENCY:
        if counts.get(state):
            return None if state == "none" else state
    return next(iter(counts), None)


def _layout(tasks: Sequence[SerializedTask]) -> dict[str, tuple[int, int]]:
    """Layers by longest path from a root; inside a layer, ordered by the mean position of
    each task's upstreams (one barycentre sweep: few crossings for DAGs people draw)."""
    layer: dict[str, int] = {}
    for t in tasks:  # topological order
        layer[t.task_id] = 1 + max((layer[u] for u in t.upstream if u in layer), default=-1)
    columns: dict[int, list[SerializedTask]] = defaultdict(list)
    for t in tasks:
        columns[layer[t.task_id]].append(t)
    row: dict[str, int] = {}
    for index in sorted(columns):
        column = columns[index]
        if index > 0:

            def barycentre(t: SerializedTask) -> float:
                ups = [row[u] for u in t.upstream if u in row]
                return sum(ups) / len(ups) if ups else 0.0

            column = sorted(column, key=barycentre)
        for position, t in enumerate(column):
            row[t.task_id] = position
    return {t: (layer[t], row[t]) for t in layer}


def _structure(dag: SerializedDag) -> models.DagStructure:
    placed = _layout(dag.tasks)
    return models.DagStructure(
        dag_id=dag.dag_id,
        description=dag.description,
        schedule=dag.schedule.description,
        tasks=[
            models.UiTask(
                task_id=t.task_id,
                operator=t.operator,
                upstream=list(t.upstream),
                downstream=list(t.downstream),
                task_group=t.task_group,
                mapped="iterate" if t.iterate is not None else "expand" if t.is_mapped else None,
                iterate_sources=list(t.iterate_sources),
                starts_in_triggerer=t.start_trigger is not None,
                layer=placed[t.task_id][0],
                row=placed[t.task_id][1],
            )
            for t in dag.tasks
        ],
        params={
            name: models.UiParam(
                default=p.default, has_default=p.has_default, description=p.description
            )
            for name, p in dag.params.items()
        },
    )


def dag_structure(conn: Connection, dag_id: str) -> models.DagStructure:
    """The DAG's latest parsed version: tasks, edges, a layout, params."""
    version_id = conn.scalar(select(Dag.latest_version_id).where(Dag.dag_id == dag_id))
    if version_id is None:
        raise NotFound(f"DAG {dag_id!r} is not known; see GET /api/v1/dags")
    with _structures_lock:
        cached = _structures.get(version_id)
    if cached is not None:
        return cached
    data = conn.scalar(select(DagVersion.data).where(DagVersion.id == version_id))
    if data is None:
        raise NotFound(f"DAG {dag_id!r} has no parsed version yet")
    structure = _structure(msgspec.convert(loads(data), SerializedDag))
    with _structures_lock:
        if len(_structures) >= _MAX_CACHED:
            _structures.clear()
        _structures[version_id] = structure
    return structure


def task_summaries(
    conn: Connection, run_ids: Sequence[int]
) -> dict[int, dict[str, models.TaskSummary]]:
    """Per run, per task: instances per state (one grouped query for all the runs)."""
    counts: dict[int, dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(dict))
    if run_ids:
        rows = conn.execute(
            select(TaskInstance.dag_run_id, TaskInstance.task_id, TaskInstance.state, func.count())
            .where(TaskInstance.dag_run_id.in_(list(run_ids)))
            .group_by(TaskInstance.dag_run_id, TaskInstance.task_id, TaskInstance.state)
        ).all()
        for run_id, task_id, state, n in rows:
            counts[run_id][task_id][state or "none"] = n
    return {
        run_id: {
            task_id: models.TaskSummary(
                task_id=task_id,
                state=summary_state(by_state),
                counts=by_state,
                total=sum(by_state.values()),
            )
            for task_id, by_state in by_task.items()
        }
        for run_id, by_task in counts.items()
    }


def _task_order(structure: models.DagStructure, seen: Sequence[dict[str, Any]]) -> list[str]:
    """The DAG's tasks, then any that only older runs had (a task since removed)."""
    order = [t.task_id for t in structure.tasks]
    known = set(order)
    extra = sorted({task_id for tasks in seen for task_id in tasks} - known)
    return order + extra


def grid(
    conn: Connection, dag_id: str, before: int | None, limit: int
) -> tuple[list[Any], dict[int, dict[str, models.TaskSummary]], list[str]]:
    """The DAG's runs (newest first, ``limit + 1`` of them), their task summaries, and the
    grid's rows: task ids in topological order."""
    structure = dag_structure(conn, dag_id)
    q = select(DagRun).where(DagRun.dag_id == dag_id).order_by(DagRun.id.desc()).limit(limit + 1)
    if before is not None:
        q = q.where(DagRun.id < before)
    runs = list(conn.execute(q).all())
    summaries = task_summaries(conn, [r.id for r in runs[:limit]])
    order = _task_order(structure, list(summaries.values()))
    return runs, summaries, order


def recent_runs(conn: Connection, dag_ids: Sequence[str]) -> dict[str, list[models.DagRun]]:
    """Each DAG's latest runs, newest first."""
    ranked = (
        select(
            DagRun,
            func.row_number()
            .over(partition_by=DagRun.dag_id, order_by=DagRun.id.desc())
            .label("rank"),
        )
        .where(DagRun.dag_id.in_(list(dag_ids)))
        .subquery()
    )
    rows = conn.execute(
        select(ranked).where(ranked.c.rank <= RECENT_RUNS).order_by(ranked.c.id.desc())
    ).all()
    out: dict[str, list[models.DagRun]] = defaultdict(list)
    for r in rows:
        out[r.dag_id].append(to_model(models.DagRun, r))
    return out


def _latest_items(conn: Connection, ti_id: int, length: int) -> list[models.StreamItem]:
    first = max(0, length - LATEST_ITEMS)
    values = read_items(conn, ti_id, first, LATEST_ITEMS)
    return [models.StreamItem(index=first + i, value=loads(v)) for i, v in enumerate(values)]


def run_view(conn: Connection, dag_id: str, run_id: str) -> models.RunView:
    """A run with its tasks summarised, and its streams with their latest items."""
    row = run_row(conn, dag_id, run_id)
    summaries = task_summaries(conn, [row.id]).get(row.id, {})
    try:
        structure: models.DagStructure | None = dag_structure(conn, dag_id)
    except NotFound:
        structure = None
    order = _task_order(structure, [summaries]) if structure else sorted(summaries)
    counts: dict[str, int] = defaultdict(int)
    for summary in summaries.values():
        for state, n in summary.counts.items():
            counts[state] += n
    streams = [
        models.StreamView(**s, latest_items=_latest_items(conn, s["task_instance_id"], s["items"]))
        for s in stream_summaries(conn, dag_run_id=row.id)
    ]
    return models.RunView(
        run=to_model(models.DagRunDetail, row, task_instance_states=dict(counts)),
        tasks=[
            summaries.get(t) or models.TaskSummary(task_id=t, state=None, counts={}, total=0)
            for t in order
        ],
        streams=streams,
    )
