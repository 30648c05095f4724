"""Connections to external systems. URIs are shown with their secrets masked."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Response

from tailrace import connections
from tailrace.api import models
from tailrace.api._auth import Admin
from tailrace.api._context import ApiContext, context
from tailrace.api._json import StrictJsonRoute
from tailrace.api._pagination import Cursor, Limit, decode_cursor, page
from tailrace.api.errors import NotFound
from tailrace.api.models import ID_MAX, ID_PATTERN

router = APIRouter(tags=["Connections"], route_class=StrictJsonRoute)
Ctx = Annotated[ApiContext, Depends(context)]
ConnId = Annotated[str, Path(pattern=ID_PATTERN, max_length=ID_MAX)]


def _out(stored: connections.StoredConnection) -> models.Connection:
    return models.Connection(
        conn_id=stored.conn_id, uri=stored.masked_uri, description=stored.description
    )


def _not_found(conn_id: str) -> NotFound:
    return NotFound(f"there is no connection {conn_id!r}")


@router.get("/connections", response_model=models.Page[models.Connection])
def get_connections(
    ctx: Ctx, cursor: str | None = Cursor, limit: int = Limit
) -> models.Page[models.Connection]:
    after = decode_cursor("connections", cursor, str)
    rows = connections.list_connections(ctx.readonly, after=after, limit=limit + 1, keys=ctx.fernet)
    items, next_cursor = page("connections", rows, limit, lambda c: c.conn_id)
    return models.Page[models.Connection](items=[_out(c) for c in items], next_cursor=next_cursor)


@router.get("/connections/{conn_id}", response_model=models.Connection)
def get_connection(ctx: Ctx, conn_id: ConnId) -> models.Connection:
    stored = connections.find_connection(ctx.readonly, conn_id, ctx.fernet)
    if stored is None:
        raise _not_found(conn_id)
    return _out(stored)


@router.post(
    "/connections", response_model=models.Connection, status_code=201, dependencies=[Admin]
)
def create_connection(ctx: Ctx, body: models.ConnectionCreate) -> models.Connection:
    """409 when the id is taken; 422 when the URI is malformed (a port out of range)."""
    stored = connections.add_connection(
        ctx.engine, body.conn_id, body.uri, body.description, keys=ctx.fernet
    )
    return _out(stored)


@router.delete("/connections/{conn_id}", status_code=204, dependencies=[Admin])
def delete_connection(ctx: Ctx, conn_id: ConnId) -> Response:
    if not connections.delete_connection(ctx.engine, conn_id):
        raise _not_found(conn_id)
    return Response(status_code=204)
