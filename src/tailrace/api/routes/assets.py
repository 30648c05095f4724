from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Depends, Query, Response
from sqlalchemy import select

from tailrace import actions
from tailrace.api import models
from tailrace.api._auth import Admin
from tailrace.api._context import ApiContext, context
from tailrace.api._json import StrictJsonRoute
from tailrace.api._pagination import Cursor, Limit, decode_cursor, page
from tailrace.api._params import DagId
from tailrace.api._rows import require_dag
from tailrace.api.errors import NotFound
from tailrace.assets import dependency_graph, get_event, list_assets, list_events, waiting_for
from tailrace.db.models import AssetEvent

router = APIRouter(tags=["Assets"], route_class=StrictJsonRoute)
Ctx = Annotated[ApiContext, Depends(context)]


@router.get("/assets", response_model=models.Page[models.Asset])
def get_assets(
    ctx: Ctx, cursor: str | None = Cursor, limit: int = Limit
) -> models.Page[models.Asset]:
    """Assets by id, with their event count, latest event, producers and consumers."""
    after = decode_cursor("assets", cursor, int)
    with ctx.readonly.connect() as conn:
        rows = list_assets(conn, after=after, limit=limit + 1)
    items, next_cursor = page("assets", rows, limit, lambda a: int(a["id"]))
    return models.Page[models.Asset](
        items=[models.Asset(**a) for a in items], next_cursor=next_cursor
    )


@router.get("/assets/events", response_model=models.Page[models.AssetEvent])
def get_asset_events(
    ctx: Ctx,
    asset: Annotated[
        str | None, Query(max_length=models.ASSET_MAX, description="Only this asset's (name).")
    ] = None,
    cursor: str | None = Cursor,
    limit: int = Limit,
) -> models.Page[models.AssetEvent]:
    """Asset events, newest first."""
    before = decode_cursor("asset_events", cursor, int)
    with ctx.readonly.connect() as conn:
        rows = list_events(conn, asset=asset, before=before, limit=limit + 1)
    items, next_cursor = page("asset_events", rows, limit, lambda e: int(e["id"]))
    return models.Page[models.AssetEvent](
        items=[models.AssetEvent(**e) for e in items], next_cursor=next_cursor
    )


@router.post(
    "/assets/events",
    response_model=models.AssetEvent,
    status_code=201,
    dependencies=[Admin],
    responses={200: {"model": models.AssetEvent, "description": "Recorded before (dedup_key)."}},
)
def create_asset_event(
    ctx: Ctx, body: Annotated[models.CreateAssetEvent, Body()], response: Response
) -> models.AssetEvent:
    """An event of an asset from outside Tailrace: recorded, and queued for the DAGs
    scheduled on the asset (the scheduler is woken). An `extra` over `max_payload_bytes`
    as JSON is a 413."""
    event_id = actions.create_asset_event(
        ctx.engine,
        ctx.wakeups,
        body.asset,
        body.extra,
        dedup_key=body.dedup_key,
        max_extra_bytes=ctx.settings.max_payload_bytes,
    )
    with ctx.readonly.connect() as conn:
        if event_id is None:
            response.status_code = 200
            event_id = conn.scalar(
                select(AssetEvent.id).where(AssetEvent.dedup_key == body.dedup_key)
            )
        event = get_event(conn, event_id) if event_id is not None else None
    assert event is not None  # events are never deleted while their asset exists
    return models.AssetEvent(**event)


@router.get("/assets/graph", response_model=models.AssetGraph)
def get_asset_graph(ctx: Ctx) -> models.AssetGraph:
    """DAGs linked by assets: producer DAG → asset → consumer DAG."""
    with ctx.readonly.connect() as conn:
        return models.AssetGraph(**dependency_graph(conn))


@router.get("/dags/{dag_id}/assets/waiting", response_model=models.AssetWaiting)
def get_asset_waiting(ctx: Ctx, dag_id: DagId) -> models.AssetWaiting:
    """What an asset-scheduled DAG's next run still waits for."""
    with ctx.readonly.connect() as conn:
        require_dag(conn, dag_id)
        waiting = waiting_for(conn, dag_id)
    if waiting is None:
        raise NotFound(f"DAG {dag_id!r} is not scheduled on assets", code="not_asset_scheduled")
    return models.AssetWaiting(**waiting)
