"""Human-in-the-loop requests and responses, with Airflow 3.1's routes and bodies."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query

from tailrace import hitl
from tailrace.api import models
from tailrace.api._auth import Admin, User
from tailrace.api._context import ApiContext, context
from tailrace.api._json import StrictJsonRoute
from tailrace.api._params import DagId, RunId, TaskId
from tailrace.api.errors import Conflict, NotFound, Unprocessable
from tailrace.api.models import ID_MAX, ID_PATTERN, INT32_MAX
from tailrace.store import hitl as store

router = APIRouter(tags=["Human in the loop"], route_class=StrictJsonRoute)
Ctx = Annotated[ApiContext, Depends(context)]
MapIndex = Annotated[int, Path(ge=-1, le=INT32_MAX)]
DagIdQuery = Annotated[str | None, Query(pattern=ID_PATTERN, max_length=ID_MAX)]
ONE = "/hitlDetails/{dag_id}/{dag_run_id}/{task_id}"


def _ti(ctx: ApiContext, dag_id: str, run_id: str, task_id: str, map_index: int) -> int:
    with ctx.readonly.connect() as conn:
        ti_id = store.find_ti(conn, dag_id, run_id, task_id, map_index)
        found = None if ti_id is None else store.detail(conn, ti_id)
    if ti_id is None or found is None:
        raise NotFound(
            f"{dag_id}.{task_id} (map index {map_index}) of run {run_id!r} has no "
            "human-in-the-loop request (not a HITL task, or not waiting yet)"
        )
    return ti_id


def _out(found: dict[str, Any]) -> models.HITLDetail:
    return models.HITLDetail.model_validate({k: v for k, v in found.items() if k != "ti_id"})


def _detail(ctx: ApiContext, ti_id: int) -> models.HITLDetail:
    with ctx.readonly.connect() as conn:
        found = store.detail(conn, ti_id)
    assert found is not None
    return _out(found)


@router.get("/hitlDetails", response_model=models.HITLDetailCollection)
def list_hitl_details(
    ctx: Ctx, dag_id: DagIdQuery = None, response_received: bool | None = None
) -> models.HITLDetailCollection:
    """Requests, oldest first: of one DAG, and only those answered (or not)."""
    with ctx.readonly.connect() as conn:
        rows = store.details(conn, dag_id=dag_id, response_received=response_received, limit=1000)
    items = [_out(r) for r in rows]
    return models.HITLDetailCollection(hitl_details=items, total_entries=len(items))


@router.get(ONE, response_model=models.HITLDetail)
def get_hitl_detail(
    ctx: Ctx, dag_id: DagId, dag_run_id: RunId, task_id: TaskId
) -> models.HITLDetail:
    return _detail(ctx, _ti(ctx, dag_id, dag_run_id, task_id, -1))


@router.get(ONE + "/{map_index}", response_model=models.HITLDetail)
def get_mapped_hitl_detail(
    ctx: Ctx, dag_id: DagId, dag_run_id: RunId, task_id: TaskId, map_index: MapIndex
) -> models.HITLDetail:
    return _detail(ctx, _ti(ctx, dag_id, dag_run_id, task_id, map_index))


def _respond(
    ctx: ApiContext, user: Any, ti_id: int, body: models.UpdateHITLDetailPayload
) -> models.HITLDetailResponse:
    try:
        found = hitl.respond(
            ctx.engine, ti_id, body.chosen_options, body.params_input, user.username
        )
    except hitl.HITLResponseError as exc:
        if "already" in str(exc):
            raise Conflict(str(exc)) from None
        raise Unprocessable(str(exc)) from None
    return models.HITLDetailResponse.model_validate(
        {k: found[k] for k in ("responded_by", "responded_at", "chosen_options", "params_input")}
    )


@router.patch(ONE, response_model=models.HITLDetailResponse, dependencies=[Admin])
def update_hitl_detail(
    ctx: Ctx,
    user: User,
    dag_id: DagId,
    dag_run_id: RunId,
    task_id: TaskId,
    body: Annotated[models.UpdateHITLDetailPayload, Body()],
) -> models.HITLDetailResponse:
    """Respond: `chosen_options` among the request's options (one unless `multiple`), and
    `params_input` for its params. The waiting task resumes within its trigger's poke
    interval. 409 once a response was given; 422 for options or params it does not take."""
    return _respond(ctx, user, _ti(ctx, dag_id, dag_run_id, task_id, -1), body)


@router.patch(ONE + "/{map_index}", response_model=models.HITLDetailResponse, dependencies=[Admin])
def update_mapped_hitl_detail(
    ctx: Ctx,
    user: User,
    dag_id: DagId,
    dag_run_id: RunId,
    task_id: TaskId,
    map_index: MapIndex,
    body: Annotated[models.UpdateHITLDetailPayload, Body()],
) -> models.HITLDetailResponse:
    return _respond(ctx, user, _ti(ctx, dag_id, dag_run_id, task_id, map_index), body)
