from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import typer
from rich.table import Table
from sqlalchemy import select

from tailrace.cli._common import console, settings
from tailrace.db import create_engine, read_only_engine, upgrade
from tailrace.db.models import Job, TaskInstance, Trigger

app = typer.Typer(help="Look at the triggers deferred tasks wait on.", no_args_is_help=True)


@app.command("list")
def list_(
    as_json: bool = typer.Option(False, "--json"),
    all_: bool = typer.Option(False, "--all", help="Include completed triggers."),
) -> None:
    """Triggers with their task, the triggerer holding them, lease and age."""
    engine = create_engine(settings().database_url)
    upgrade(engine)
    q = (
        select(
            Trigger.id,
            Trigger.classpath,
            Job.hostname,
            Job.pid,
            Job.latest_heartbeat,
            Trigger.created_at,
            Trigger.completed,
            Trigger.next_sequence,
            TaskInstance.dag_id,
            TaskInstance.task_id,
            TaskInstance.map_index,
            TaskInstance.run_id,
            TaskInstance.state,
        )
        .outerjoin(TaskInstance, TaskInstance.trigger_id == Trigger.id)
        .outerjoin(Job, Job.id == Trigger.triggerer_job_id)
        .order_by(Trigger.id)
    )
    if not all_:
        q = q.where(Trigger.completed.is_(False))
    with read_only_engine(engine).connect() as conn:
        rows = conn.execute(q).all()
    s = settings()
    now = datetime.now(UTC)
    lease = timedelta(seconds=s.trigger_lease_seconds)

    def lease_left(r: Any) -> float | None:
        # A lease lasts while its triggerer heartbeats: it ends a lease after the last beat.
        if r.latest_heartbeat is None:
            return None
        left: float = (r.latest_heartbeat + lease - now).total_seconds()
        return left

    data = [
        {
            "id": r.id,
            "trigger": r.classpath.rsplit(".", 1)[-1],
            "classpath": r.classpath,
            "task": None
            if r.task_id is None
            else f"{r.dag_id}.{r.task_id}" + (f"[{r.map_index}]" if r.map_index >= 0 else ""),
            "run_id": r.run_id,
            "task_state": r.state,
            "triggerer": f"{r.hostname}:{r.pid}" if r.pid is not None else None,
            "lease_left_seconds": lease_left(r),
            "age_seconds": round((now - r.created_at).total_seconds(), 1),
            "events": r.next_sequence,
            "completed": r.completed,
        }
        for r in rows
    ]
    if as_json:
        console.print_json(data=data)
        return
    table = Table(title="Triggers")
    for column in ("id", "trigger", "task", "triggerer", "lease left", "age", "events"):
        table.add_column(column, justify="right" if column in ("id", "age", "events") else "left")
    for d in data:
        left = d["lease_left_seconds"]
        lease_text = "unclaimed" if left is None else f"{left:.0f}s"
        table.add_row(
            str(d["id"]),
            d["trigger"],
            d["task"] or "",
            d["triggerer"] or "",
            lease_text,
            f"{d['age_seconds']:.0f}s",
            str(d["events"]),
        )
    console.print(table)
