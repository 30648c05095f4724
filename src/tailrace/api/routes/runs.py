from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Depends
from sqlalchemy import Connection, func, select

from tailrace import actions
from tailrace.api import models
from tailrace.api._auth import Admin
from tailrace.api._context import ApiContext, context
from tailrace.api._json import StrictJsonRoute
from tailrace.api._pagination import Cursor, Limit, decode_cursor, page
from tailrace.api._params import DagId, RunId
from tailrace.api._rows import require_dag, run_row, to_model
from tailrace.db.models import DagRun, TaskInstance
from tailrace.store import deadlines

router = APIRouter(tags=["DAG runs"], route_class=StrictJsonRoute)
Ctx = Annotated[ApiContext, Depends(context)]


@router.get("/dags/{dag_id}/runs", response_model=models.Page[models.DagRun])
def get_runs(
    ctx: Ctx,
    dag_id: DagId,
    state: str | None = None,
    cursor: str | None = Cursor,
    limit: int = Limit,
) -> models.Page[models.DagRun]:
    """The DAG's runs, newest first."""
    before = decode_cursor("runs", cursor, int)
    q = select(DagRun).where(DagRun.dag_id == dag_id).order_by(DagRun.id.desc()).limit(limit + 1)
    if before is not None:
        q = q.where(DagRun.id < before)
    if state is not None:
        q = q.where(DagRun.state == state)
    with ctx.readonly.connect() as conn:
        require_dag(conn, dag_id)
        rows = conn.execute(q).all()
    items, next_cursor = page("runs", rows, limit, lambda r: int(r.id))
    return models.Page[models.DagRun](
        items=[to_model(models.DagRun, r) for r in items], next_cursor=next_cursor
    )


@router.post(
    "/dags/{dag_id}/runs",
    response_model=models.DagRun,
    status_code=201,
    dependencies=[Admin],
)
def trigger_run(
    ctx: Ctx, dag_id: DagId, body: Annotated[models.TriggerDagRun, Body()]
) -> models.DagRun:
    """Create a manual run (queued) with `conf`, validated against the DAG's params; the
    scheduler is woken to run it. A `conf` over `max_payload_bytes` as JSON is a 413, as
    an XCom that size would be."""
    created: list[models.DagRun] = []

    def describe(conn: Connection, pk: int, run_id: str) -> None:
        # Read in the creating transaction: the answer is the run as created, queued.
        created.append(to_model(models.DagRun, run_row(conn, dag_id, run_id)))

    actions.trigger_run(
        ctx.engine,
        ctx.wakeups,
        dag_id,
        body.conf,
        run_id=body.run_id,
        max_conf_bytes=ctx.settings.max_payload_bytes,
        then=describe,
    )
    return created[0]


@router.post(
    "/dags/{dag_id}/runs/{run_id}/replay",
    response_model=models.DagRun,
    status_code=201,
    dependencies=[Admin],
)
def replay_run(
    ctx: Ctx, dag_id: DagId, run_id: RunId, body: Annotated[models.ReplayRequest, Body()]
) -> models.DagRun:
    """A new run of `task_id` (and everything downstream of it), as the DAG is now, over
    this finished run's retained streams: the tasks upstream of it do not run again (their
    outputs are copied) and no source is touched. 422 `cannot_replay` when the stream is
    past its retention or the task is gone, naming what."""
    _, new_run = actions.replay_run(
        ctx.engine, ctx.wakeups, dag_id, run_id, body.task_id, run_id=body.run_id
    )
    with ctx.readonly.connect() as conn:
        return to_model(models.DagRun, run_row(conn, dag_id, new_run))


@router.get("/dags/{dag_id}/runs/{run_id}", response_model=models.DagRunDetail)
def get_run(ctx: Ctx, dag_id: DagId, run_id: RunId) -> models.DagRunDetail:
    with ctx.readonly.connect() as conn:
        row = run_row(conn, dag_id, run_id)
        counts = conn.execute(
            select(TaskInstance.state, func.count())
            .where(TaskInstance.dag_run_id == row.id)
            .group_by(TaskInstance.state)
        ).all()
        alerts = [models.RunDeadline(**d) for d in deadlines.of_run(conn, row.id)]
    states = {state or "none": n for state, n in counts}
    return to_model(models.DagRunDetail, row, task_instance_states=states, deadlines=alerts)


@router.post(
    "/dags/{dag_id}/runs/{run_id}/clear", response_model=models.ClearResult, dependencies=[Admin]
)
def clear_run(
    ctx: Ctx,
    dag_id: DagId,
    run_id: RunId,
    body: Annotated[models.ClearRequest | None, Body()] = None,
) -> models.ClearResult:
    """Run the run's task instances (or only `task_ids`, or only the failed ones with
    `only_failed`) again; deferred ones have their triggers cancelled."""
    body = body or models.ClearRequest()
    with ctx.readonly.connect() as conn:
        run_row(conn, dag_id, run_id)
    cleared = actions.clear(
        ctx.engine, ctx.wakeups, dag_id, run_id, body.task_ids, only_failed=body.only_failed
    )
    return models.ClearResult(cleared=cleared)
