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


def _detail(
    ctx: ApiContext, dag_id: str, run_id: str, task_id: str, map_index: int
) -> models.HITLDetail:
    with ctx.readonly.connect() as conn:
        try:
            found = hitl.find_request(conn, dag_id, run_id, task_id, map_index)
        except hitl.HITLRequestNotFoundError as exc:
            raise NotFound(str(exc)) from None
    return _out(found)


def _out(found: dict[str, Any]) -> models.HITLDetail:
    return models.HITLDetail.model_validate({k: v for k, v in found.items() if k != "ti_id"})


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
    return _detail(ctx, dag_id, dag_run_id, task_id, -1)


@router.get(ONE + "/{map_index}", response_model=models.HITLDetail)
def get_mapped_hitl_detail(
    ctx: Ctx, dag_id: DagId, dag_run_id: RunId, task_id: TaskId, map_index: MapIndex
) -> models.HITLDetail:
    return _detail(ctx, dag_id, dag_run_id, task_id, map_index)


def _respond(
    ctx: ApiContext,
    user: Any,
    key: tuple[str, str, str, int],
    body: models.UpdateHITLDetailPayload,
) -> models.HITLDetailResponse:
    try:
        found = hitl.respond(
            ctx.engine,
            *key,
            chosen_options=body.chosen_options,
            params_input=body.params_input,
            responded_by=user.username,
        )
    except hitl.HITLRequestNotFoundError as exc:
        raise NotFound(str(exc)) from None
    except hitl.HITLNotWaitingError as exc:
        raise Conflict(str(exc)) from None
    except hitl.HITLResponseError as exc:
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
    interval. 409 once a response was given (or the task no longer waits); 422 for options
    or params it does not take."""
    return _respond(ctx, user, (dag_id, dag_run_id, task_id, -1), body)


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
    return _respond(ctx, user, (dag_id, dag_run_id, task_id, map_index), body)
