from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query
from sqlalchemy import select

from tailrace.api import models
from tailrace.api._context import ApiContext, context
from tailrace.api._json import StrictJsonRoute
from tailrace.api._pagination import Cursor, Limit, decode_cursor, encode_cursor, page
from tailrace.api._params import DbId
from tailrace.api.errors import NotFound
from tailrace.api.models import ID_MAX, ID_PATTERN
from tailrace.db.models import TaskInstance
from tailrace.serialization import loads
from tailrace.store.dead_letters import list_letters
from tailrace.streams import read_items, stream_summaries

router = APIRouter(tags=["Streams"], route_class=StrictJsonRoute)
Ctx = Annotated[ApiContext, Depends(context)]


@router.get("/streams", response_model=models.Page[models.Stream])
def get_streams(
    ctx: Ctx,
    dag_id: Annotated[str | None, Query(pattern=ID_PATTERN, max_length=ID_MAX)] = None,
    cursor: str | None = Cursor,
    limit: int = Limit,
) -> models.Page[models.Stream]:
    """Every task instance that waited on a trigger: events produced, acknowledged and
    pending, items in its output stream, rate, and whether backpressure paused it."""
    after = decode_cursor("streams", cursor, int)
    with ctx.readonly.connect() as conn:
        rows = stream_summaries(
            conn,
            dag_id=dag_id,
            after_task_instance_id=after,
            limit=limit + 1,
        )
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        next_cursor = encode_cursor("streams", int(rows[-1]["task_instance_id"]))
    return models.Page[models.Stream](
        items=[models.Stream(**r) for r in rows], next_cursor=next_cursor
    )


@router.get("/streams/dead-letters", response_model=models.Page[models.DeadLetter])
def get_dead_letters(
    ctx: Ctx,
    dag_id: Annotated[str | None, Query(pattern=ID_PATTERN, max_length=ID_MAX)] = None,
    cursor: str | None = Cursor,
    limit: int = Limit,
) -> models.Page[models.DeadLetter]:
    """Trigger events whose batch failed every try of a task with
    `stream_retry="dead_letter"`, oldest first: acknowledged, so the stream went on, and
    kept with the error (`reason`)."""
    after = decode_cursor("dead-letters", cursor, int)
    with ctx.readonly.connect() as conn:
        rows = list_letters(conn, dag_id=dag_id, after=after, limit=limit + 1)
    items, next_cursor = page("dead-letters", rows, limit, lambda d: d.id)
    return models.Page[models.DeadLetter](
        items=[models.DeadLetter.of(d) for d in items],
        next_cursor=next_cursor,
    )


@router.get("/streams/{task_instance_id}", response_model=models.Stream)
def get_stream(ctx: Ctx, task_instance_id: DbId) -> models.Stream:
    with ctx.readonly.connect() as conn:
        rows = stream_summaries(conn, task_instance_id=task_instance_id)
    if not rows:
        raise NotFound(f"task instance {task_instance_id} has no stream; see GET /api/v1/streams")
    return models.Stream(**rows[0])


@router.get("/streams/{task_instance_id}/items", response_model=models.Page[models.StreamItem])
def get_stream_items(
    ctx: Ctx, task_instance_id: DbId, cursor: str | None = Cursor, limit: int = Limit
) -> models.Page[models.StreamItem]:
    """The task instance's output stream in order, a page at a time (empty while it has
    produced nothing)."""
    start = decode_cursor("stream-items", cursor, int)
    first = max(start or 0, 0)
    with ctx.readonly.connect() as conn:
        if conn.scalar(select(TaskInstance.id).where(TaskInstance.id == task_instance_id)) is None:
            raise NotFound(f"there is no task instance {task_instance_id}")
        values = read_items(conn, task_instance_id, first, limit + 1)
    more = len(values) > limit
    values = values[:limit]
    return models.Page[models.StreamItem](
        items=[models.StreamItem(index=first + i, value=loads(v)) for i, v in enumerate(values)],
        next_cursor=encode_cursor("stream-items", first + limit) if more else None,
    )
