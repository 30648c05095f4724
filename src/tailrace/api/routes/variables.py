"""Variables. Values of secret-looking keys are shown masked; tasks read them unmasked."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Response
from sqlalchemy.exc import IntegrityError

from tailrace import variables
from tailrace.api import models
from tailrace.api._auth import Admin
from tailrace.api._context import ApiContext, context
from tailrace.api._json import StrictJsonRoute
from tailrace.api._pagination import Cursor, Limit, decode_cursor, page
from tailrace.api.errors import Conflict, NotFound
from tailrace.api.models import ID_MAX, ID_PATTERN

router = APIRouter(tags=["Variables"], route_class=StrictJsonRoute)
Ctx = Annotated[ApiContext, Depends(context)]
Key = Annotated[str, Path(pattern=ID_PATTERN, max_length=ID_MAX)]


def _out(stored: variables.StoredVariable) -> models.Variable:
    return models.Variable(
        key=stored.key, value=stored.masked_value, description=stored.description
    )


def _not_found(key: str) -> NotFound:
    return NotFound(f"there is no variable {key!r}")


@router.get("/variables", response_model=models.Page[models.Variable])
def get_variables(
    ctx: Ctx, cursor: str | None = Cursor, limit: int = Limit
) -> models.Page[models.Variable]:
    after = decode_cursor("variables", cursor, str)
    rows = variables.list_variables(ctx.readonly, after=after, limit=limit + 1, keys=ctx.fernet)
    items, next_cursor = page("variables", rows, limit, lambda v: v.key)
    return models.Page[models.Variable](items=[_out(v) for v in items], next_cursor=next_cursor)


@router.get("/variables/{key}", response_model=models.Variable)
def get_variable(ctx: Ctx, key: Key) -> models.Variable:
    stored = variables.find_variable(ctx.readonly, key, ctx.fernet)
    if stored is None:
        raise _not_found(key)
    return _out(stored)


@router.post("/variables", response_model=models.Variable, status_code=201, dependencies=[Admin])
def create_variable(ctx: Ctx, body: models.VariableCreate) -> models.Variable:
    """409 when the key is taken (change it with PATCH)."""
    conflict = Conflict(
        f"variable {body.key!r} already exists; change it with PATCH /variables/{body.key}"
    )
    try:
        with ctx.engine.begin() as conn:
            if variables.read_variable(conn, body.key, ctx.fernet) is not None:
                raise conflict
            variables.write_variable(conn, body.key, body.value, body.description, ctx.fernet)
    except IntegrityError:  # another writer added it since the check
        raise conflict from None
    return _out(variables.StoredVariable(body.key, body.value, body.description))


@router.patch("/variables/{key}", response_model=models.Variable, dependencies=[Admin])
def update_variable(ctx: Ctx, key: Key, body: models.VariableUpdate) -> models.Variable:
    with ctx.engine.begin() as conn:
        if variables.read_variable(conn, key, ctx.fernet) is None:
            raise _not_found(key)
        variables.write_variable(conn, key, body.value, body.description, ctx.fernet)
    return _out(variables.StoredVariable(key, body.value, body.description))


@router.delete("/variables/{key}", status_code=204, dependencies=[Admin])
def delete_variable(ctx: Ctx, key: Key) -> Response:
    if not variables.delete_variable(ctx.engine, key):
        raise _not_found(key)
    return Response(status_code=204)
