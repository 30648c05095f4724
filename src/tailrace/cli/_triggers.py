from __future__ import annotations

from datetime import UTC, datetime

import typer
from rich.table import Table
from sqlalchemy import select

from tailrace.cli._common import console, settings
from tailrace.db import create_engine, read_only_engine, upgrade
from tailrace.db.models import TaskInstance, Trigger

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
            Trigger.triggerer_id,
            Trigger.lease_expires_at,
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
        .order_by(Trigger.id)
    )
    if not all_:
        q = q.where(Trigger.completed.is_(False))
    with read_only_engine(engine).connect() as conn:
        rows = conn.execute(q).all()
    now = datetime.now(UTC)
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
            "triggerer": r.triggerer_id,
            "lease_expires_at": r.lease_expires_at.isoformat() if r.lease_expires_at else None,
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
    for d, r in zip(data, rows, strict=True):
        lease = (
            f"{(r.lease_expires_at - now).total_seconds():.0f}s"
            if r.lease_expires_at
            else "unclaimed"
        )
        table.add_row(
            str(d["id"]),
            d["trigger"],
            d["task"] or "",
            d["triggerer"] or "",
            lease,
            f"{d['age_seconds']:.0f}s",
            str(d["events"]),
        )
    console.print(table)
