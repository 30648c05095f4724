from __future__ import annotations

import json

import typer
from rich.table import Table

from tailrace.cli._common import CliError, console, settings
from tailrace.db import create_engine, read_only_engine, upgrade
from tailrace.serialization import loads
from tailrace.streams import read_items, stream_summaries

app = typer.Typer(help="Look at streams flowing from triggers into tasks.", no_args_is_help=True)


def _summaries(dag_id: str | None) -> list[dict[str, object]]:
    engine = create_engine(settings().database_url)
    upgrade(engine)
    with read_only_engine(engine).connect() as conn:
        return stream_summaries(conn, dag_id=dag_id)


@app.command("list")
def list_(
    dag_id: str = typer.Option(None, "--dag-id", help="Only this DAG's streams."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Every stream: produced, acknowledged, pending, rate, and paused by backpressure."""
    rows = _summaries(dag_id)
    if as_json:
        console.print_json(data=rows)
        return
    table = Table(title="Streams")
    columns = ("task", "run", "consumer", "produced", "acked", "pending", "items", "ev/s", "")
    for column in columns:
        table.add_column(column, justify="right" if column in columns[3:8] else "left")
    for r in rows:
        task = f"{r['dag_id']}.{r['task_id']}" + (
            f"[{r['map_index']}]" if int(str(r["map_index"])) >= 0 else ""
        )
        flag = (
            "[yellow]paused[/]"
            if r["paused_by_backpressure"]
            else ("[green]closed[/]" if r["closed"] else str(r["task_state"]))
        )
        table.add_row(
            task,
            str(r["run_id"]),
            str(r["consumer"]),
            f"{r['produced']:,}",
            f"{r['acknowledged']:,}",
            f"{r['pending']:,}",
            f"{r['items']:,}",
            "" if r["events_per_second"] is None else f"{r['events_per_second']:,}",
            flag,
        )
    console.print(table)


@app.command("show")
def show(
    dag_id: str,
    task_id: str,
    run_id: str = typer.Option(None, "--run-id", help="Default: the latest run."),
    limit: int = typer.Option(10, "--limit", help="Items to print from the start."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """One stream's figures and its first items."""
    rows = [
        r
        for r in _summaries(dag_id)
        if r["task_id"] == task_id and (run_id is None or r["run_id"] == run_id)
    ]
    if not rows:
        raise CliError(f"no stream for {dag_id}.{task_id}; see `tailrace streams list`")
    summary = rows[-1]
    engine = create_engine(settings().database_url)
    with read_only_engine(engine).connect() as conn:
        items = [
            loads(v) for v in read_items(conn, int(str(summary["task_instance_id"])), 0, limit)
        ]
    if as_json:
        print(json.dumps({**summary, "first_items": items}))
        return
    for key, value in summary.items():
        console.print(f"[bold]{key}[/]: {value}")
    console.print(f"[bold]first {len(items)} items[/]:")
    for item in items:
        console.print(f"  {item!r}")
