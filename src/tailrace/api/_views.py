"""What the web UI's pages show, read with a few summarising queries.

A mapped task is summarised with ``GROUP BY state``: the grid of a run with 10,000 (or a
million) instances reads one row per task and state, never the instances themselves.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, NamedTuple

import msgspec
from sqlalchemy import Connection, func, select

from tailrace import tracing
from tailrace.api import models
from tailrace.api._rows import run_row, task_instance_row, to_model
from tailrace.api.errors import NotFound
from tailrace.clock import utcnow
from tailrace.db.models import (
    Dag,
    DagRun,
    DagVersion,
    RenderedTaskInstanceFields,
    TaskInstance,
    XCom,
)
from tailrace.serialization import SerializedDag, SerializedTask, loads
from tailrace.store import deadlines
from tailrace.store.dead_letters import list_letters
from tailrace.streams import read_items, stream_summaries
from tailrace.tracing.timeline import run_timeline

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
ERROR_CHARS = 300
XCOM_CHARS = 100_000
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


def _decorated_names() -> dict[str, str]:
    """``@task`` variants create private operator classes: name each as the author wrote it."""
    from tailrace.sdk._decorators import _DecoratedMixin

    names: dict[str, str] = {}
    pending: list[type] = [_DecoratedMixin]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls is not _DecoratedMixin:
            names[cls.__name__] = getattr(cls, "custom_operator_name", cls.__name__)
    return names


_OPERATOR_NAMES = _decorated_names()


def operator_name(operator: str) -> str:
    return _OPERATOR_NAMES.get(operator, operator)


class Layout(NamedTuple):
    positions: dict[str, tuple[int, int]]  # task id: (layer, row)
    groups: list[models.UiGroup]


def _parents(names: set[str]) -> dict[str, str | None]:
    """A group's parent: the longest other group whose id prefixes its own (``a`` of
    ``a.b``), as nested groups' ids are built."""
    return {
        g: max((p for p in names if g.startswith(p + ".")), key=len, default=None) for g in names
    }


def _layout(tasks: Sequence[SerializedTask]) -> Layout:
    """Layers by longest path from a root. Rows come in bands: a container's own tasks,
    then a band per task group inside it (recursively), so the box around a group's rows
    and layers holds its tasks and no others. Inside a band each layer is ordered by the
    mean row of its tasks' upstreams (one barycentre sweep: few crossings)."""
    layer: dict[str, int] = {}
    for t in tasks:  # topological order
        layer[t.task_id] = 1 + max((layer[u] for u in t.upstream if u in layer), default=-1)
    names = {t.task_group for t in tasks if t.task_group}
    parents = _parents(names)
    subgroups: dict[str | None, list[str]] = defaultdict(list)
    for g in sorted(names):
        subgroups[parents[g]].append(g)
    own: dict[str | None, list[SerializedTask]] = defaultdict(list)
    for t in tasks:
        own[t.task_group].append(t)
    row: dict[str, int] = {}
    groups: list[models.UiGroup] = []

    def barycentre(t: SerializedTask) -> float:
        ups = [row[u] for u in t.upstream if u in row]
        return sum(ups) / len(ups) if ups else 0.0

    def layers_of(g: str) -> list[int]:
        return [layer[t.task_id] for t in own[g]] + [
            x for sub in subgroups[g] for x in layers_of(sub)
        ]

    def place(container: str | None, top: int, depth: int) -> tuple[int, list[str]]:
        """Rows from ``top`` for the container's tasks; the next free row, and its tasks."""
        columns: dict[int, list[SerializedTask]] = defaultdict(list)
        for t in own[container]:
            columns[layer[t.task_id]].append(t)
        for index in sorted(columns):
            for position, t in enumerate(sorted(columns[index], key=barycentre)):
                row[t.task_id] = top + position
        bottom = top + max((len(c) for c in columns.values()), default=0)
        members = [t.task_id for t in own[container]]
        for g in sorted(subgroups[container], key=lambda g: min(layers_of(g), default=0)):
            next_row, inside = place(g, bottom, depth + 1)
            if not inside:
                continue
            parent = parents[g]
            groups.append(
                models.UiGroup(
                    group_id=g,
                    label=g[len(parent) + 1 :] if parent else g,
                    parent=parent,
                    depth=depth,
                    first_layer=min(layer[t] for t in inside),
                    last_layer=max(layer[t] for t in inside),
                    first_row=bottom,
                    last_row=next_row - 1,
                )
            )
            bottom = next_row
            members.extend(inside)
        return bottom, members

    place(None, 0, 0)
    groups.sort(key=lambda g: g.depth)  # parents before their children
    return Layout({t: (layer[t], row[t]) for t in layer}, groups)


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
                operator_name=operator_name(t.operator),
                upstream=list(t.upstream),
                downstream=list(t.downstream),
                task_group=t.task_group,
                mapped="iterate" if t.iterate is not None else "expand" if t.is_mapped else None,
                iterate_sources=list(t.iterate_sources),
                starts_in_triggerer=t.start_trigger is not None,
                layer=placed.positions[t.task_id][0],
                row=placed.positions[t.task_id][1],
            )
            for t in dag.tasks
        ],
        edges=[
            models.UiEdge(
                source_id=up,
                target_id=t.task_id,
                label=dag.edge_info.get(up, {}).get(t.task_id, {}).get("label"),
            )
            for t in dag.tasks
            for up in t.upstream
        ],
        groups=placed.groups,
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


def _latest_dead_letters(conn: Connection, ti_id: int, count: int) -> list[models.DeadLetter]:
    if not count:
        return []
    letters = list_letters(conn, task_instance_id=ti_id, limit=LATEST_ITEMS, newest_first=True)
    return [models.DeadLetter.of(letter) for letter in letters]


def _error_line(error: str) -> str:
    """An error's last line: for a traceback, the exception and its message."""
    lines = [line for line in error.strip().splitlines() if line.strip()]
    line = lines[-1].strip() if lines else error
    return line if len(line) <= ERROR_CHARS else line[: ERROR_CHARS - 1] + "…"


def run_tasks(
    conn: Connection,
    dag_run_id: int,
    order: Sequence[str],
    summaries: dict[str, models.TaskSummary],
) -> list[models.RunTask]:
    """Each task of a run: instances per state, its latest try, first start, last end, and
    the error of its first failed instance; grouped queries, never a mapped task's rows."""
    ti = TaskInstance
    times = {
        r.task_id: r
        for r in conn.execute(
            select(
                ti.task_id,
                func.max(ti.try_number).label("try_number"),
                func.min(ti.start_date).label("start_date"),
                func.max(ti.end_date).label("end_date"),
                func.count().label("instances"),
                func.count(ti.end_date).label("ended"),
            )
            .where(ti.dag_run_id == dag_run_id)
            .group_by(ti.task_id)
        )
    }
    ranked = (
        select(
            ti.task_id,
            ti.map_index,
            ti.error,
            func.row_number().over(partition_by=ti.task_id, order_by=ti.map_index).label("rank"),
        )
        .where(
            ti.dag_run_id == dag_run_id,
            ti.state.in_(["failed", "up_for_retry"]),
            ti.error.is_not(None),
        )
        .subquery()
    )
    errors = {r.task_id: r for r in conn.execute(select(ranked).where(ranked.c.rank == 1))}
    out = []
    for task_id in order:
        summary = summaries.get(task_id) or models.TaskSummary(
            task_id=task_id, state=None, counts={}, total=0
        )
        t, e = times.get(task_id), errors.get(task_id)
        ended = t is not None and t.ended == t.instances and t.end_date is not None
        out.append(
            models.RunTask(
                **summary.model_dump(),
                try_number=t.try_number if t else 0,
                start_date=t.start_date if t else None,
                end_date=t.end_date if ended and t else None,
                duration=(t.end_date - t.start_date).total_seconds()
                if ended and t and t.start_date
                else None,
                error=_error_line(e.error) if e else None,
                error_map_index=e.map_index if e else None,
            )
        )
    return out


def run_view(conn: Connection, dag_id: str, run_id: str) -> models.RunView:
    """A run with its tasks summarised, and its streams with their latest items."""
    row = run_row(conn, dag_id, run_id)
    try:
        structure: models.DagStructure | None = dag_structure(conn, dag_id)
    except NotFound:
        structure = None
    summaries = task_summaries(conn, [row.id]).get(row.id, {})
    order = _task_order(structure, [summaries]) if structure else sorted(summaries)
    tasks = run_tasks(conn, row.id, order, summaries)
    counts: dict[str, int] = defaultdict(int)
    for task in tasks:
        for state, n in task.counts.items():
            counts[state] += n
    streams = [
        models.StreamView(
            **s,
            latest_items=_latest_items(conn, s["task_instance_id"], s["items"]),
            latest_dead_letters=_latest_dead_letters(
                conn, s["task_instance_id"], s["dead_letters"]
            ),
        )
        for s in stream_summaries(conn, dag_run_id=row.id)
    ]
    return models.RunView(
        run=to_model(
            models.DagRunDetail,
            row,
            task_instance_states=dict(counts),
            deadlines=[models.RunDeadline(**d) for d in deadlines.of_run(conn, row.id)],
        ),
        tasks=tasks,
        streams=streams,
    )


def xcom_entries(
    conn: Connection, dag_id: str, run_id: str, task_id: str, map_index: int
) -> list[models.XComEntry]:
    """The XComs a task instance pushed, by key; a value longer than ``XCOM_CHARS`` of JSON
    comes as its cut text."""
    task_instance_row(conn, dag_id, run_id, task_id, map_index)
    run = run_row(conn, dag_id, run_id)
    rows = conn.execute(
        select(XCom.key, XCom.map_index, XCom.value, XCom.created_at)
        .where(XCom.dag_run_id == run.id, XCom.task_id == task_id, XCom.map_index == map_index)
        .order_by(XCom.key)
    ).all()
    return [
        models.XComEntry(
            key=r.key,
            map_index=r.map_index,
            value=loads(r.value) if len(r.value) <= XCOM_CHARS else r.value[:XCOM_CHARS],
            truncated=len(r.value) > XCOM_CHARS,
            size=len(r.value),
            created_at=r.created_at,
        )
        for r in rows
    ]


def rendered_fields(
    conn: Connection,
    dag_id: str,
    run_id: str,
    task_id: str,
    map_index: int,
    try_number: int | None,
) -> models.RenderedFields:
    """A try's templated fields as its worker rendered them (the latest try by default)."""
    ti = task_instance_row(conn, dag_id, run_id, task_id, map_index)
    wanted = ti.try_number if try_number is None else try_number
    if not 1 <= wanted <= max(ti.try_number, 1):
        raise NotFound(f"{task_id} has no try {wanted} (its tries are 1 to {ti.try_number})")
    row = conn.execute(
        select(RenderedTaskInstanceFields).where(
            RenderedTaskInstanceFields.task_instance_id == ti.id,
            RenderedTaskInstanceFields.try_number == wanted,
        )
    ).first()
    fields = row.rendered_fields if row is not None else {}
    return models.RenderedFields(
        try_number=wanted,
        rendered=row is not None,
        fields=[models.RenderedField(field=k, value=v) for k, v in fields.items()],
    )


def run_timeline_view(conn: Connection, dag_id: str, run_id: str) -> models.RunTimeline:
    """The run's Gantt: each instance's tries as queued, running and deferred segments,
    the batches of trigger events it was handed and the trigger runs they came from."""
    row = run_row(conn, dag_id, run_id)
    now = utcnow()
    return models.RunTimeline(
        dag_id=dag_id,
        run_id=run_id,
        trace_id=tracing.trace_id_hex(tracing.run_trace_id(dag_id, run_id, row.id)),
        tracing=tracing.enabled(),
        state=row.state,
        start_date=row.start_date,
        end_date=row.end_date,
        now=now,
        tasks=[models.TimelineTask(**t) for t in run_timeline(conn, row.id, now)],
    )
