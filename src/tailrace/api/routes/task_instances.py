from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query
from sqlalchemy import select

from tailrace import actions
from tailrace.api import models
from tailrace.api._auth import Admin
from tailrace.api._context import ApiContext, context
from tailrace.api._json import StrictJsonRoute
from tailrace.api._pagination import Cursor, Limit, decode_cursor, page
from tailrace.api._params import DagId, MapIndex, RunId, TaskId
from tailrace.api._rows import require_task, run_row, task_instance_row, to_model
from tailrace.api.models import ID_MAX, ID_PATTERN, INT32_MAX
from tailrace.db.models import TaskInstance, TaskInstanceHistory

router = APIRouter(tags=["Task instances"], route_class=StrictJsonRoute)
Ctx = Annotated[ApiContext, Depends(context)]
BASE = "/dags/{dag_id}/runs/{run_id}/task-instances"


@router.get(BASE, response_model=models.Page[models.TaskInstance])
def get_task_instances(
    ctx: Ctx,
    dag_id: DagId,
    run_id: RunId,
    state: Annotated[
        list[str] | None,
        Query(description="Only these states (repeatable); 'none' for not yet scheduled."),
    ] = None,
    task_id: Annotated[str | None, Query(pattern=ID_PATTERN, max_length=ID_MAX)] = None,
    map_index_gte: Annotated[int | None, Query(ge=-1, le=INT32_MAX)] = None,
    map_index_lte: Annotated[int | None, Query(ge=-1, le=INT32_MAX)] = None,
    cursor: str | None = Cursor,
    limit: int = Limit,
) -> models.Page[models.TaskInstance]:
    """The run's task instances in creation order, filtered by state, task and map index."""
    after = decode_cursor("task-instances", cursor, int)
    with ctx.readonly.connect() as conn:
        run = run_row(conn, dag_id, run_id)
        q = (
            select(TaskInstance)
            .where(TaskInstance.dag_run_id == run.id)
            .order_by(TaskInstance.id)
            .limit(limit + 1)
        )
        if after is not None:
            q = q.where(TaskInstance.id > after)
        if state:
            named = [s for s in state if s != "none"]
            condition = TaskInstance.state.in_(named)
            q = q.where(condition | TaskInstance.state.is_(None) if "none" in state else condition)
        if task_id is not None:
            q = q.where(TaskInstance.task_id == task_id)
        if map_index_gte is not None:
            q = q.where(TaskInstance.map_index >= map_index_gte)
        if map_index_lte is not None:
            q = q.where(TaskInstance.map_index <= map_index_lte)
        rows = conn.execute(q).all()
    items, next_cursor = page("task-instances", rows, limit, lambda r: int(r.id))
    return models.Page[models.TaskInstance](
        items=[to_model(models.TaskInstance, r) for r in items], next_cursor=next_cursor
    )


@router.get(BASE + "/{task_id}", response_model=models.TaskInstanceDetail)
def get_task_instance(
    ctx: Ctx, dag_id: DagId, run_id: RunId, task_id: TaskId, map_index: MapIndex = -1
) -> models.TaskInstanceDetail:
    """One task instance with its tries (logs: `.../logs/{try_number}`)."""
    with ctx.readonly.connect() as conn:
        ti = task_instance_row(conn, dag_id, run_id, task_id, map_index)
        history = conn.execute(
            select(TaskInstanceHistory)
            .where(TaskInstanceHistory.task_instance_id == ti.id)
            .order_by(TaskInstanceHistory.try_number)
        ).all()
    tries = [to_model(models.TaskTry, h) for h in history]
    if ti.try_number > 0 and all(t.try_number != ti.try_number for t in tries):
        tries.append(to_model(models.TaskTry, ti))
    return to_model(models.TaskInstanceDetail, ti, tries=tries)


@router.post(BASE + "/{task_id}/clear", response_model=models.ClearResult, dependencies=[Admin])
def clear_task_instance(
    ctx: Ctx, dag_id: DagId, run_id: RunId, task_id: TaskId
) -> models.ClearResult:
    """Run the task (every map index of it) again; a deferred one's trigger is cancelled."""
    with ctx.readonly.connect() as conn:
        require_task(conn, dag_id, run_id, task_id)
    return models.ClearResult(
        cleared=actions.clear(ctx.engine, ctx.wakeups, dag_id, run_id, [task_id])
    )


@router.patch(BASE + "/{task_id}", response_model=models.MarkResult, dependencies=[Admin])
def mark_task_instance(
    ctx: Ctx, dag_id: DagId, run_id: RunId, task_id: TaskId, body: models.MarkRequest
) -> models.MarkResult:
    """Set the task's instances (every map index) to success, failed or skipped by hand."""
    with ctx.readonly.connect() as conn:
        require_task(conn, dag_id, run_id, task_id)
    return models.MarkResult(
        marked=actions.mark(ctx.engine, ctx.wakeups, dag_id, run_id, [task_id], body.state)
    )
