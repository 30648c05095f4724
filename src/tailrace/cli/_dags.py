from __future__ import annotations

import json
from typing import Any

import typer
from rich.table import Table

from tailrace import actions
from tailrace.cli import _runs
from tailrace.cli._common import CliError, console, err_console, settings
from tailrace.dag_processing import ParseOptions, parse_and_sync
from tailrace.dagrun import trigger_dag_run
from tailrace.dags import import_errors, list_dags
from tailrace.db import create_engine, read_only_engine, upgrade
from tailrace.notify import Wakeups
from tailrace.scheduler import utcnow

app = typer.Typer(help="Look at and run DAGs.", no_args_is_help=True)


def _engine_with_dags(parse: bool = True) -> Any:
    s = settings()
    engine = create_engine(s.database_url)
    upgrade(engine)
    if parse:
        with console.status(f"Parsing {s.dags_folder} …"):
            parse_and_sync(engine, str(s.dags_folder), utcnow(), ParseOptions.from_settings(s))
    return engine


def _conf(raw: str | None) -> dict[str, Any]:
    if raw is None:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise CliError(f"--conf is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise CliError("--conf must be a JSON object, like '{\"key\": 1}'")
    return value


@app.command("list")
def list_(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the DAGs in the dags folder, with their schedule and latest run."""
    engine = _engine_with_dags()
    with read_only_engine(engine).connect() as conn:
        rows = list_dags(conn)
    if as_json:
        console.print_json(data=rows)
        return
    table = Table(title="DAGs")
    for column in ("dag_id", "schedule", "paused", "next run", "latest run"):
        table.add_column(column)
    for r in rows:
        table.add_row(
            r["dag_id"],
            r["schedule"] or "None",
            "yes" if r["paused"] else "no",
            r["next_run"] or "",
            _runs.styled(r["latest_run_state"]) if r["latest_run_state"] else "",
        )
    console.print(table)


@app.command("list-import-errors")
def list_import_errors(as_json: bool = typer.Option(False, "--json")) -> None:
    """Files that failed to import or hold invalid DAGs, with the line and reason."""
    engine = _engine_with_dags()
    with read_only_engine(engine).connect() as conn:
        rows = sorted(import_errors(conn), key=lambda e: str(e["filename"]))
    if as_json:
        console.print_json(data=rows)
        return
    if not rows:
        console.print("[green]No import errors.[/]")
        return
    table = Table(title="Import errors", show_lines=True)
    for column in ("file", "line", "error"):
        table.add_column(column, overflow="fold")
    for r in rows:
        table.add_row(r["filename"], str(r["line"] or ""), r["message"])
    console.print(table)
    raise typer.Exit(1)


def _set_paused(dag_id: str, paused: bool) -> None:
    engine = _engine_with_dags(parse=False)
    actions.set_paused(engine, Wakeups(settings().home, engine), dag_id, paused)
    console.print(f"DAG {dag_id} {'paused' if paused else 'unpaused'}")


@app.command()
def pause(dag_id: str) -> None:
    """Stop creating scheduled runs of a DAG."""
    _set_paused(dag_id, True)


@app.command()
def unpause(dag_id: str) -> None:
    """Resume creating scheduled runs of a DAG."""
    _set_paused(dag_id, False)


@app.command("trigger")
def trigger(
    dag_id: str,
    conf: str = typer.Option(None, "--conf", "-c", help="Run conf as a JSON object."),
    run_id: str = typer.Option(None, "--run-id"),
    wait: bool = typer.Option(False, "--wait", help="Wait until the run finishes."),
    timeout: float = typer.Option(
        None, "--timeout", help="Give up waiting after this many seconds."
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print the run and its task instances as JSON."
    ),
) -> None:
    """Create a manual run; a running scheduler (standalone or `tailrace scheduler`) runs it."""
    engine = _engine_with_dags()
    pk, run_key = actions.trigger_run(
        engine, Wakeups(settings().home, engine), dag_id, _conf(conf), run_id=run_id
    )
    if not wait:
        if as_json:
            console.print_json(data=_runs.report(engine, pk))
        else:
            console.print(f"Created run [bold]{run_key}[/] of {dag_id}")
        return

    def slow() -> None:
        err_console.print(
            "[yellow]The run is still queued after 10s: is a scheduler running? "
            "Start one with `tailrace scheduler` or `tailrace standalone`.[/]"
        )

    finished = _runs.wait(engine, pk, timeout, on_slow=slow)
    _print_result(engine, pk, as_json)
    if not finished:
        raise CliError(f"run {run_key} did not finish within {timeout}s")


def _print_result(engine: Any, pk: int, as_json: bool) -> None:
    rep = _runs.report(engine, pk)
    if as_json:
        print(json.dumps(rep))
    else:
        console.print(_runs.headline(rep))
        console.print(_runs.task_table(rep))
        error = _runs.first_error(rep)
        if error is not None:
            err_console.print(f"[red]Task {error[0]} failed:[/]\n{error[1]}")
    if rep["state"] != "success":
        raise typer.Exit(1)


@app.command("test")
def test(
    dag_id: str,
    conf: str = typer.Option(None, "--conf", "-c", help="Run conf as a JSON object."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Run one DAG run now with a private scheduler, workers and triggerer.

    Exits 0 only when the run succeeds.
    """
    from tailrace.standalone import make_scheduler, make_triggerer

    s = settings()
    engine = _engine_with_dags()
    pk, _ = trigger_dag_run(engine, dag_id, _conf(conf))
    scheduler = make_scheduler(s, engine, processes=min(2, s.worker_processes), only_runs={pk})
    triggerer = make_triggerer(s, engine, only_runs={pk})
    scheduler.on_triggers_changed = triggerer.wake
    triggerer.on_events = scheduler.events_arrived
    scheduler.on_acks = triggerer.acks_arrived
    thread = triggerer.run_in_thread()
    try:
        with console.status(f"Running {dag_id} …"):
            scheduler.run_until(lambda: _runs.is_finished(engine, pk))
    finally:
        scheduler.stop()
        triggerer.stop()
        thread.join(timeout=30)
    _print_result(engine, pk, as_json)
