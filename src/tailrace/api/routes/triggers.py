from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from tailrace.api import models
from tailrace.api._context import ApiContext, context
from tailrace.api._json import StrictJsonRoute
from tailrace.api._pagination import Cursor, Limit, decode_cursor, page
from tailrace.clock import utcnow
from tailrace.triggers import trigger_summaries

router = APIRouter(tags=["Triggers"], route_class=StrictJsonRoute)
Ctx = Annotated[ApiContext, Depends(context)]


@router.get("/triggers", response_model=models.Page[models.Trigger])
def get_triggers(
    ctx: Ctx,
    include_completed: Annotated[bool, Query(description="Also completed triggers.")] = False,
    cursor: str | None = Cursor,
    limit: int = Limit,
) -> models.Page[models.Trigger]:
    """Triggers with the task waiting on them, the triggerer holding the lease, and age."""
    after = decode_cursor("triggers", cursor, int)
    with ctx.readonly.connect() as conn:
        rows = trigger_summaries(
            conn,
            utcnow(),
            ctx.settings.trigger_lease_seconds,
            include_completed=include_completed,
            after=after,
            limit=limit + 1,
        )
    items, next_cursor = page("triggers", rows, limit, lambda t: int(t["id"]))
    return models.Page[models.Trigger](
        items=[models.Trigger(**{k: t[k] for k in models.Trigger.model_fields}) for t in items],
        next_cursor=next_cursor,
    )
