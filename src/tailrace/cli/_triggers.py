from __future__ import annotations

import typer

from tailrace.cli._common import console, database, print_json, settings

app = typer.Typer(help="Look at the triggers deferred tasks wait on.", no_args_is_help=True)


@app.command("list")
def list_(
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    all_: bool = typer.Option(False, "--all", help="Include completed triggers."),
) -> None:
    """Triggers with their task, the triggerer holding them, lease and age."""
    from datetime import UTC, datetime

    from rich.markup import escape

    from tailrace.cli._tables import make_table
    from tailrace.db import read_only_engine
    from tailrace.triggers import trigger_summaries

    s = settings()
    with read_only_engine(database(s)).connect() as conn:
        data = trigger_summaries(
            conn, datetime.now(UTC), s.trigger_lease_seconds, include_completed=all_
        )
    if as_json:
        print_json(data)
        return
    rows = []
    for d in data:
        left = d["lease_left_seconds"]
        rows.append(
            (
                str(d["id"]),
                escape(d["trigger"]),
                escape(d["task"] or ""),
                escape(d["triggerer"] or ""),
                "unclaimed" if left is None else f"{left:.0f}s",
                f"{d['age_seconds']:.0f}s",
                str(d["events"]),
            )
        )
    table = make_table(
        ("id", "trigger", "task", "triggerer", "lease left", "age", "events"),
        rows,
        title="Triggers",
        keys=(0, 2),
        right=(0, 5, 6),
    )
    console.print(table)
