"""Backfills, with Airflow 3's routes and bodies: create (and dry-run), list a DAG's,
read one, pause, unpause and cancel."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Depends, Path, Query

from tailrace import actions, backfills
from tailrace.api import models
from tailrace.api._auth import Admin, User
from tailrace.api._context import ApiContext, context
from tailrace.api._json import StrictJsonRoute
from tailrace.api._rows import require_dag
from tailrace.api.models import ID_MAX, ID_PATTERN, INT32_MAX
from tailrace.clock import utcnow
from tailrace.store import backfills as store
from tailrace.store.backfills import BackfillRow

router = APIRouter(tags=["Backfills"], route_class=StrictJsonRoute)
Ctx = Annotated[ApiContext, Depends(context)]
BackfillId = Annotated[int, Path(ge=0, le=INT32_MAX)]
DagIdQuery = Annotated[str | None, Query(pattern=ID_PATTERN, max_length=ID_MAX)]


def _out(row: BackfillRow) -> models.Backfill:
    return models.Backfill.model_validate(row.as_dict())


def _request(body: models.BackfillPostBody) -> backfills.BackfillRequest:
    return backfills.BackfillRequest(
        dag_id=body.dag_id,
        from_date=body.from_date,
        to_date=body.to_date,
        reprocess_behavior=backfills.ReprocessBehavior(body.reprocess_behavior),
        max_active_runs=body.max_active_runs,
        run_backwards=body.run_backwards,
        dag_run_conf=body.dag_run_conf,
    )


@router.get("/backfills", response_model=models.BackfillCollection)
def list_backfills(ctx: Ctx, dag_id: DagIdQuery = None) -> models.BackfillCollection:
    """The DAG's backfills (without `dag_id`: every DAG's), oldest first."""
    with ctx.readonly.connect() as conn:
        if dag_id is not None:
            require_dag(conn, dag_id)
        rows = store.listed(conn, dag_id)
    return models.BackfillCollection(backfills=[_out(r) for r in rows], total_entries=len(rows))


@router.post("/backfills", response_model=models.Backfill, dependencies=[Admin])
def create_backfill(
    ctx: Ctx, user: User, body: Annotated[models.BackfillPostBody, Body()]
) -> models.Backfill:
    """Create the backfill's runs (queued, run type `backfill`) for the logical dates the
    DAG's schedule has from `from_date` to `to_date`; existing runs are run again as
    `reprocess_behavior` says. 409 while the DAG has a backfill that is not complete; 422
    for a DAG without a time-based schedule, future dates, or `depends_on_past` tasks
    with `run_backwards` or reprocess `none`."""
    row = actions.create_backfill(
        ctx.engine, ctx.wakeups, _request(body), triggering_user_name=user.username
    )
    return _out(row)


@router.post(
    "/backfills/dry_run", response_model=models.DryRunBackfillCollection, dependencies=[Admin]
)
def dry_run_backfill(
    ctx: Ctx, body: Annotated[models.BackfillPostBody, Body()]
) -> models.DryRunBackfillCollection:
    """The logical dates a backfill would create or reprocess runs for now (as Airflow,
    for those who may create one)."""
    dates = backfills.dry_run(ctx.readonly, _request(body), utcnow())
    return models.DryRunBackfillCollection(
        backfills=[models.DryRunBackfill(logical_date=d) for d in dates],
        total_entries=len(dates),
    )


@router.get("/backfills/{backfill_id}", response_model=models.Backfill)
def get_backfill(ctx: Ctx, backfill_id: BackfillId) -> models.Backfill:
    return _out(backfills.get_backfill(ctx.readonly, backfill_id))


def _change(ctx: ApiContext, backfill_id: int, change: str) -> models.Backfill:
    return _out(actions.change_backfill(ctx.engine, ctx.wakeups, backfill_id, change))


@router.put("/backfills/{backfill_id}/pause", response_model=models.Backfill, dependencies=[Admin])
def pause_backfill(ctx: Ctx, backfill_id: BackfillId) -> models.Backfill:
    """Its queued runs wait (those running go on). 409 once it is complete."""
    return _change(ctx, backfill_id, "pause")


@router.put(
    "/backfills/{backfill_id}/unpause", response_model=models.Backfill, dependencies=[Admin]
)
def unpause_backfill(ctx: Ctx, backfill_id: BackfillId) -> models.Backfill:
    return _change(ctx, backfill_id, "unpause")


@router.put("/backfills/{backfill_id}/cancel", response_model=models.Backfill, dependencies=[Admin])
def cancel_backfill(ctx: Ctx, backfill_id: BackfillId) -> models.Backfill:
    """Paused, its queued runs failed (those running finish) and complete."""
    return _change(ctx, backfill_id, "cancel")
