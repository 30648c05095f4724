from __future__ import annotations

from datetime import UTC, datetime

import typer
from rich.table import Table

from tailrace.cli._common import console, settings
from tailrace.db import create_engine, read_only_engine, upgrade
from tailrace.triggers import trigger_summaries

app = typer.Typer(help="Look at the triggers deferred tasks wait on.", no_args_is_help=True)


@app.command("list")
def list_(
    as_json: bool = typer.Option(False, "--json"),
    all_: bool = typer.Option(False, "--all", help="Include completed triggers."),
) -> None:
    """Triggers with their task, the triggerer holding them, lease and age."""
    s = settings()
    engine = create_engine(s.database_url)
    upgrade(engine)
    with read_only_engine(engine).connect() as conn:
        data = trigger_summaries(
            conn, datetime.now(UTC), s.trigger_lease_seconds, include_completed=all_
        )
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
