from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from tailrace import actions
from tailrace.api import models
from tailrace.api._auth import Admin
from tailrace.api._context import ApiContext, context
from tailrace.api._json import StrictJsonRoute
from tailrace.api._pagination import Cursor, Limit, decode_cursor, page
from tailrace.api._params import DagId
from tailrace.api.errors import NotFound
from tailrace.dags import import_errors, list_dags

router = APIRouter(tags=["DAGs"], route_class=StrictJsonRoute)
Ctx = Annotated[ApiContext, Depends(context)]


@router.get("/dags", response_model=models.Page[models.Dag])
def get_dags(ctx: Ctx, cursor: str | None = Cursor, limit: int = Limit) -> models.Page[models.Dag]:
    """Active DAGs, by id."""
    after = decode_cursor("dags", cursor, str)
    with ctx.readonly.connect() as conn:
        rows = list_dags(conn, after=after, limit=limit + 1)
    items, next_cursor = page("dags", rows, limit, lambda d: str(d["dag_id"]))
    return models.Page[models.Dag](items=[models.Dag(**d) for d in items], next_cursor=next_cursor)


@router.get("/dags/{dag_id}", response_model=models.Dag)
def get_dag(ctx: Ctx, dag_id: DagId) -> models.Dag:
    with ctx.readonly.connect() as conn:
        rows = list_dags(conn, dag_id=dag_id)
    if not rows:
        raise NotFound(f"DAG {dag_id!r} is not known; see GET /api/v1/dags")
    return models.Dag(**rows[0])


@router.patch("/dags/{dag_id}", response_model=models.Dag, dependencies=[Admin])
def patch_dag(ctx: Ctx, dag_id: DagId, body: models.DagPatch) -> models.Dag:
    """Pause (`is_paused: true`) or unpause a DAG: paused DAGs get no scheduled runs."""
    actions.set_paused(ctx.engine, ctx.wakeups, dag_id, body.is_paused)
    return get_dag(ctx, dag_id)


@router.get("/import-errors", response_model=models.Page[models.DagImportError])
def get_import_errors(
    ctx: Ctx, cursor: str | None = Cursor, limit: int = Limit
) -> models.Page[models.DagImportError]:
    """Files in the dags folder that failed to import or define invalid DAGs."""
    after = decode_cursor("import-errors", cursor, int)
    with ctx.readonly.connect() as conn:
        rows = import_errors(conn, after=after, limit=limit + 1)
    items, next_cursor = page("import-errors", rows, limit, lambda e: int(e["id"]))
    return models.Page[models.DagImportError](
        items=[models.DagImportError(**e) for e in items], next_cursor=next_cursor
    )
