"""Connections to external systems. URIs are shown with their secrets masked."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from fastapi import APIRouter, Depends, Path, Response
from sqlalchemy import delete, insert, select

from tailrace.api import models
from tailrace.api._auth import Admin
from tailrace.api._context import ApiContext, context
from tailrace.api._pagination import Cursor, Limit, decode_cursor, page
from tailrace.api.errors import Conflict, NotFound
from tailrace.api.models import ID_MAX, ID_PATTERN
from tailrace.config import mask_url_password
from tailrace.db.models import Connection

router = APIRouter(tags=["Connections"])
Ctx = Annotated[ApiContext, Depends(context)]
ConnId = Annotated[str, Path(pattern=ID_PATTERN, max_length=ID_MAX)]

_SECRET_PARTS = ("password", "secret", "token", "key", "credential")
_MASK = "***"


def mask_uri(uri: str) -> str:
    """The URI with its password and secret-looking query values replaced by ***."""
    masked = mask_url_password(uri)
    try:
        parts = urlsplit(masked)
    except ValueError:
        return _MASK
    if not parts.query:
        return masked
    query = [
        (k, _MASK if any(p in k.lower() for p in _SECRET_PARTS) else v)
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
    ]
    return urlunsplit(parts._replace(query=urlencode(query, safe="*")))


def _out(row: Any) -> models.Connection:
    return models.Connection(
        conn_id=row.conn_id, uri=mask_uri(row.uri), description=row.description
    )


@router.get("/connections", response_model=models.Page[models.Connection])
def get_connections(
    ctx: Ctx, cursor: str | None = Cursor, limit: int = Limit
) -> models.Page[models.Connection]:
    after = decode_cursor("connections", cursor, str)
    q = select(Connection).order_by(Connection.conn_id).limit(limit + 1)
    if after is not None:
        q = q.where(Connection.conn_id > after)
    with ctx.readonly.connect() as conn:
        rows = conn.execute(q).all()
    items, next_cursor = page("connections", rows, limit, lambda r: str(r.conn_id))
    return models.Page[models.Connection](items=[_out(r) for r in items], next_cursor=next_cursor)


@router.get("/connections/{conn_id}", response_model=models.Connection)
def get_connection(ctx: Ctx, conn_id: ConnId) -> models.Connection:
    with ctx.readonly.connect() as conn:
        row = conn.execute(select(Connection).where(Connection.conn_id == conn_id)).first()
    if row is None:
        raise NotFound(f"there is no connection {conn_id!r}")
    return _out(row)


@router.post(
    "/connections", response_model=models.Connection, status_code=201, dependencies=[Admin]
)
def create_connection(ctx: Ctx, body: models.ConnectionCreate) -> models.Connection:
    with ctx.engine.begin() as conn:
        exists = conn.scalar(select(Connection.id).where(Connection.conn_id == body.conn_id))
        if exists is not None:
            raise Conflict(
                f"connection {body.conn_id!r} already exists; delete it first to replace it"
            )
        conn.execute(
            insert(Connection).values(
                conn_id=body.conn_id, uri=body.uri, description=body.description
            )
        )
    return get_connection(ctx, body.conn_id)


@router.delete("/connections/{conn_id}", status_code=204, dependencies=[Admin])
def delete_connection(ctx: Ctx, conn_id: ConnId) -> Response:
    with ctx.engine.begin() as conn:
        deleted = conn.execute(delete(Connection).where(Connection.conn_id == conn_id))
    if deleted.rowcount == 0:
        raise NotFound(f"there is no connection {conn_id!r}")
    return Response(status_code=204)
