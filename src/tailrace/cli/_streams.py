from __future__ import annotations

from datetime import datetime

import typer

from tailrace.cli._common import CliError, console, database, print_json

app = typer.Typer(help="Look at streams flowing from triggers into tasks.", no_args_is_help=True)


def _summaries(dag_id: str | None) -> list[dict[str, object]]:
    from tailrace.db import read_only_engine
    from tailrace.streams import stream_summaries

    with read_only_engine(database()).connect() as conn:
        return stream_summaries(conn, dag_id=dag_id)


def _flag(r: dict[str, object]) -> str:
    if r["paused_by_backpressure"]:
        return "[yellow]paused[/]"
    return "[green]closed[/]" if r["closed"] else str(r["task_state"])


@app.command("list")
def list_(
    dag_id: str = typer.Option(None, "--dag-id", help="Only this DAG's streams."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Every stream: produced, acknowledged, pending, rate, and paused by backpressure."""
    from rich.markup import escape

    from tailrace.cli._tables import make_table

    rows = _summaries(dag_id)
    if as_json:
        print_json(rows)
        return
    lines = []
    for r in rows:
        task = f"{r['dag_id']}.{r['task_id']}" + (
            f"[{r['map_index']}]" if int(str(r["map_index"])) >= 0 else ""
        )
        lines.append(
            (
                escape(task),
                escape(str(r["run_id"])),
                str(r["consumer"]),
                f"{r['produced']:,}",
                f"{r['acknowledged']:,}",
                f"{r['pending']:,}",
                f"{r['items']:,}",
                "" if r["events_per_second"] is None else f"{r['events_per_second']:,}",
                _flag(r),
            )
        )
    table = make_table(
        ("task", "run", "consumer", "produced", "acked", "pending", "items", "ev/s", "state"),
        lines,
        title="Streams",
        right=range(3, 8),
    )
    console.print(table)


@app.command("show")
def show(
    dag_id: str,
    task_id: str,
    run_id: str = typer.Option(None, "--run-id", help="Default: the latest run."),
    limit: int = typer.Option(10, "--limit", help="Items to print from the start."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """One stream's figures and its first items."""
    from tailrace.db import read_only_engine
    from tailrace.serialization import loads
    from tailrace.streams import read_items

    rows = [
        r
        for r in _summaries(dag_id)
        if r["task_id"] == task_id and (run_id is None or r["run_id"] == run_id)
    ]
    if not rows:
        raise CliError(f"no stream for {dag_id}.{task_id}; see `tailrace streams list`")
    summary = rows[-1]
    with read_only_engine(database()).connect() as conn:
        items = [
            loads(v) for v in read_items(conn, int(str(summary["task_instance_id"])), 0, limit)
        ]
    if as_json:
        print_json({**summary, "first_items": items})
        return
    from rich.markup import escape

    for key, value in summary.items():
        console.print(f"[bold]{key}[/]: {escape(str(value))}", soft_wrap=True)
    console.print(f"[bold]first {len(items)} items[/]:")
    for item in items:
        console.print(f"  {item!r}", markup=False, soft_wrap=True)


@app.command("replay")
def replay(
    dag_id: str = typer.Argument(..., help="The DAG."),
    source_run_id: str = typer.Argument(..., help="The finished run whose streams to read."),
    task_id: str = typer.Option(
        ..., "--task", "-t", help="The consumer to run again (with everything after it)."
    ),
    run_id: str = typer.Option(None, "--run-id", help="The new run's id (default replay__…)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Run a consumer again, as its DAG is now, over an earlier run's retained streams:
    its upstream tasks do not run (their outputs are copied), no source is touched."""
    from rich.markup import escape

    from tailrace import actions
    from tailrace.cli._common import settings
    from tailrace.notify import Wakeups

    s = settings()
    engine = database(s)
    try:
        _, key = actions.replay_run(
            engine, Wakeups(s.home, engine), dag_id, source_run_id, task_id, run_id=run_id
        )
    finally:
        engine.dispose()
    if as_json:
        print_json(
            {"dag_id": dag_id, "run_id": key, "replay_of": source_run_id, "task_id": task_id}
        )
        return
    console.print(
        f"Replay run [bold]{escape(key)}[/] of {escape(dag_id)} created: "
        f"{escape(task_id)} and what follows it run again over the streams of "
        f"{escape(source_run_id)}",
        soft_wrap=True,
    )


@app.command("dead-letters")
def dead_letters_(
    dag_id: str = typer.Option(None, "--dag-id", help="Only this DAG's dead letters."),
    limit: int = typer.Option(100, "--limit", min=1, help="At most this many, oldest first."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (with payloads)."),
) -> None:
    """Trigger events whose batch failed every try of a task with
    stream_retry="dead_letter": acknowledged, so the stream went on, and kept with the
    error."""
    from rich.markup import escape

    from tailrace.cli._tables import make_table
    from tailrace.db import read_only_engine
    from tailrace.store.dead_letters import Letter, list_letters

    with read_only_engine(database()).connect() as conn:
        letters = list_letters(conn, dag_id=dag_id, limit=limit)
    if as_json:
        import msgspec

        print_json(msgspec.to_builtins(letters))
        return
    # One row per failed batch: its task, run and try, the events' range, the error.
    # A batch's letters share their task, run, try and the moment they were recorded.
    batches: dict[tuple[str, str, int, datetime], list[Letter]] = {}
    for d in letters:
        task = f"{d.dag_id}.{d.task_id}" + (f"[{d.map_index}]" if d.map_index >= 0 else "")
        batches.setdefault((task, d.run_id, d.try_number, d.created_at), []).append(d)
    lines = [
        (
            escape(task),
            escape(run_id),
            f"#{batch[0].sequence_index:,}"
            + (f"-#{batch[-1].sequence_index:,}" if len(batch) > 1 else ""),
            f"{len(batch):,}",
            escape((batch[0].reason.strip().splitlines() or [""])[-1]),
        )
        for (task, run_id, _, _), batch in batches.items()
    ]
    console.print(
        make_table(
            ("task", "run", "events", "count", "reason"),
            lines,
            title="Dead letters",
            right=(3,),
            prose=(4,),
        )
    )
