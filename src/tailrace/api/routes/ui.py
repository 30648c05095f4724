"""Read routes shaped for the web UI's pages, each with a live (Server-Sent Events) twin."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response

from tailrace.api import models
from tailrace.api._context import ApiContext, context
from tailrace.api._json import StrictJsonRoute
from tailrace.api._live import EVENT_STREAM, EventStreamResponse, snapshots
from tailrace.api._pagination import Cursor, Limit, decode_cursor, page
from tailrace.api._params import DagId, MapIndex, RunId, TaskId
from tailrace.api._rows import to_model
from tailrace.api._views import (
    dag_structure,
    grid,
    recent_runs,
    rendered_fields,
    run_timeline_view,
    run_view,
    xcom_entries,
)
from tailrace.dags import list_dags
from tailrace.tracing import run_trace_id, trace_id_hex

router = APIRouter(prefix="/ui", tags=["Web UI"], route_class=StrictJsonRoute)
Ctx = Annotated[ApiContext, Depends(context)]
GridLimit = Query(25, ge=1, le=200, description="Runs per page.")


def _dags(ctx: ApiContext, cursor: str | None, limit: int) -> models.Page[models.DagOverview]:
    after = decode_cursor("dags", cursor, str)
    with ctx.readonly.connect() as conn:
        rows = list_dags(conn, after=after, limit=limit + 1)
        items, next_cursor = page("dags", rows, limit, lambda d: str(d["dag_id"]))
        recent = recent_runs(conn, [d["dag_id"] for d in items])
    return models.Page[models.DagOverview](
        items=[models.DagOverview(**d, recent_runs=recent.get(d["dag_id"], [])) for d in items],
        next_cursor=next_cursor,
    )


@router.get("/dags", response_model=models.Page[models.DagOverview])
def get_dags(
    ctx: Ctx, cursor: str | None = Cursor, limit: int = Limit
) -> models.Page[models.DagOverview]:
    """Active DAGs by id, each with its latest runs (newest first)."""
    return _dags(ctx, cursor, limit)


@router.get("/dags/events", response_class=EventStreamResponse, responses=EVENT_STREAM)
def get_dags_events(ctx: Ctx, cursor: str | None = Cursor, limit: int = Limit) -> Response:
    """`GET /ui/dags` as a live stream."""
    return snapshots(ctx, lambda: _dags(ctx, cursor, limit))


@router.get("/dags/{dag_id}/structure", response_model=models.DagStructure)
def get_structure(ctx: Ctx, dag_id: DagId) -> models.DagStructure:
    """The DAG's tasks in topological order, their edges, a layered layout and params."""
    with ctx.readonly.connect() as conn:
        return dag_structure(conn, dag_id)


def _grid(ctx: ApiContext, dag_id: str, cursor: str | None, limit: int) -> models.Grid:
    before = decode_cursor("grid", cursor, int)
    with ctx.readonly.connect() as conn:
        runs, summaries, order = grid(conn, dag_id, before, limit)
    items, next_cursor = page("grid", runs, limit, lambda r: int(r.id))
    return models.Grid(
        task_ids=order,
        items=[
            to_model(
                models.GridRun,
                r,
                tasks=summaries.get(r.id, {}),
                trace_id=trace_id_hex(run_trace_id(r.dag_id, r.run_id, r.id)),
            )
            for r in items
        ],
        next_cursor=next_cursor,
    )


@router.get("/dags/{dag_id}/grid", response_model=models.Grid)
def get_grid(
    ctx: Ctx, dag_id: DagId, cursor: str | None = Cursor, limit: int = GridLimit
) -> models.Grid:
    """Runs (newest first) by tasks: each task's instances counted per state, so a mapped
    task of any size is one cell."""
    return _grid(ctx, dag_id, cursor, limit)


@router.get(
    "/dags/{dag_id}/grid/events",
    response_class=EventStreamResponse,
    responses=EVENT_STREAM,
)
def get_grid_events(
    ctx: Ctx, dag_id: DagId, cursor: str | None = Cursor, limit: int = GridLimit
) -> Response:
    """`GET /ui/dags/{dag_id}/grid` as a live stream."""
    return snapshots(ctx, lambda: _grid(ctx, dag_id, cursor, limit))


def _run(ctx: ApiContext, dag_id: str, run_id: str) -> models.RunView:
    with ctx.readonly.connect() as conn:
        return run_view(conn, dag_id, run_id)


@router.get("/dags/{dag_id}/runs/{run_id}", response_model=models.RunView)
def get_run(ctx: Ctx, dag_id: DagId, run_id: RunId) -> models.RunView:
    """A run, its tasks counted per state, and its streams (events produced, acknowledged,
    pending, rate, backpressure) with their latest items."""
    return _run(ctx, dag_id, run_id)


@router.get(
    "/dags/{dag_id}/runs/{run_id}/events",
    response_class=EventStreamResponse,
    responses=EVENT_STREAM,
)
def get_run_events(ctx: Ctx, dag_id: DagId, run_id: RunId) -> Response:
    """`GET /ui/dags/{dag_id}/runs/{run_id}` as a live stream."""
    return snapshots(ctx, lambda: _run(ctx, dag_id, run_id))


@router.get("/dags/{dag_id}/runs/{run_id}/timeline", response_model=models.RunTimeline)
def get_run_timeline(ctx: Ctx, dag_id: DagId, run_id: RunId) -> models.RunTimeline:
    """The run as a Gantt: each try's queued, running and deferred segments, the batches of
    trigger events handed to it and their trigger runs, and the run's trace id."""
    with ctx.readonly.connect() as conn:
        return run_timeline_view(conn, dag_id, run_id)


@router.get(
    "/dags/{dag_id}/runs/{run_id}/tasks/{task_id}/xcom", response_model=list[models.XComEntry]
)
def get_xcom(
    ctx: Ctx, dag_id: DagId, run_id: RunId, task_id: TaskId, map_index: MapIndex = -1
) -> list[models.XComEntry]:
    """The XComs a task instance pushed (`return_value` and any other keys)."""
    with ctx.readonly.connect() as conn:
        return xcom_entries(conn, dag_id, run_id, task_id, map_index)


TryNumber = Annotated[int | None, Query(ge=1, le=1_000_000, description="Default: the latest.")]


@router.get(
    "/dags/{dag_id}/runs/{run_id}/tasks/{task_id}/rendered", response_model=models.RenderedFields
)
def get_rendered(
    ctx: Ctx,
    dag_id: DagId,
    run_id: RunId,
    task_id: TaskId,
    map_index: MapIndex = -1,
    try_number: TryNumber = None,
) -> models.RenderedFields:
    """A try's templated fields as rendered for it (Airflow's "Rendered Template")."""
    with ctx.readonly.connect() as conn:
        return rendered_fields(conn, dag_id, run_id, task_id, map_index, try_number)
