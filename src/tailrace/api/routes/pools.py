"""Pools (Airflow's): how many slots each has and how many its task instances take."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Response

from tailrace.api import models
from tailrace.api._auth import Admin
from tailrace.api._context import ApiContext, context
from tailrace.api._json import StrictJsonRoute
from tailrace.api._pagination import Cursor, Limit, decode_cursor, page
from tailrace.api.errors import Conflict, NotFound
from tailrace.api.models import ID_MAX, ID_PATTERN
from tailrace.store import pools

router = APIRouter(tags=["Pools"], route_class=StrictJsonRoute)
Ctx = Annotated[ApiContext, Depends(context)]
PoolName = Annotated[str, Path(pattern=ID_PATTERN, max_length=ID_MAX)]


def _out(pool: pools.PoolUsage) -> models.Pool:
    return models.Pool.model_validate(pool.as_dict())


@router.get("/pools", response_model=models.Page[models.Pool])
def get_pools(
    ctx: Ctx, cursor: str | None = Cursor, limit: int = Limit
) -> models.Page[models.Pool]:
    after = decode_cursor("pools", cursor, str)
    with ctx.readonly.connect() as conn:
        rows = [p for p in pools.usage(conn) if after is None or p.name > after][: limit + 1]
    items, next_cursor = page("pools", rows, limit, lambda p: p.name)
    return models.Page[models.Pool](items=[_out(p) for p in items], next_cursor=next_cursor)


@router.get("/pools/{name}", response_model=models.Pool)
def get_pool(ctx: Ctx, name: PoolName) -> models.Pool:
    with ctx.readonly.connect() as conn:
        try:
            return _out(pools.get_pool(conn, name))
        except pools.PoolNotFoundError as exc:
            raise NotFound(str(exc)) from None


@router.put("/pools/{name}", response_model=models.Pool, dependencies=[Admin])
def put_pool(ctx: Ctx, name: PoolName, body: models.PoolSet) -> models.Pool:
    """Create the pool, or set its slots, description and include_deferred."""
    with ctx.engine.begin() as conn:
        pools.set_pool(conn, name, body.slots, body.description, body.include_deferred)
        return _out(pools.get_pool(conn, name))


@router.delete("/pools/{name}", status_code=204, dependencies=[Admin])
def delete_pool(ctx: Ctx, name: PoolName) -> Response:
    """404 for an unknown pool; 409 for default_pool, which cannot be deleted."""
    with ctx.engine.begin() as conn:
        try:
            pools.delete_pool(conn, name)
        except pools.PoolNotFoundError as exc:
            raise NotFound(str(exc)) from None
        except pools.PoolError as exc:
            raise Conflict(str(exc)) from None
    return Response(status_code=204)
