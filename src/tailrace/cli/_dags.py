from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import typer

from tailrace.cli import _runs
from tailrace.cli._common import CliError, console, database, err_console, print_json, settings

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from tailrace.config import Settings

app = typer.Typer(help="Look at and run DAGs.", no_args_is_help=True)


def _engine_with_dags(s: Settings, dag_id: str | None = None) -> Engine:
    """The database, after parsing the DAG folders if it does not reflect them (see
    `tailrace.cli._parse`: a running scheduler usually has)."""
    from tailrace.cli._parse import ensure_parsed
    from tailrace.config import dag_folders

    engine = database(s)
    ensure_parsed(engine, dag_folders(s), dag_id, s)
    return engine


def _conf(raw: str | None, option: str = "--conf") -> dict[str, Any]:
    if raw is None:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise CliError(f"{option} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise CliError(f"{option} must be a JSON object, like '{{\"key\": 1}}'")
    return value


@app.command("list")
def list_(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the DAGs, with their schedule and latest run (parsing the DAG folders first
    when the database does not reflect them)."""
    from tailrace.cli._tables import make_table
    from tailrace.dags import list_dags
    from tailrace.db import read_only_engine

    engine = _engine_with_dags(settings())
    with read_only_engine(engine).connect() as conn:
        rows = list_dags(conn)
    if as_json:
        print_json(rows)
        return
    table = make_table(
        ("dag_id", "schedule", "paused", "next run (UTC)", "latest run"),
        [
            (
                r["dag_id"],
                r["schedule"] or "None",
                "yes" if r["paused"] else "no",
                _short_time(r["next_run"]),
                _runs.styled(r["latest_run_state"]) if r["latest_run_state"] else "",
            )
            for r in rows
        ],
        title="DAGs",
    )
    console.print(table)


@app.command("list-runs")
def list_runs(
    dag_id: str,
    state: str = typer.Option(None, "--state", help="Only runs in this state."),
    limit: int = typer.Option(100, "--limit", help="At most this many, newest first."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """The DAG's runs, newest first, with their type (scheduled, manual,
    asset_triggered, backfill)."""
    from tailrace.cli._tables import make_table
    from tailrace.dags import list_dags
    from tailrace.dags import list_runs as runs_of
    from tailrace.db import read_only_engine
    from tailrace.errors import DagNotFoundError

    engine = _engine_with_dags(settings(), dag_id)
    with read_only_engine(engine).connect() as conn:
        if not list_dags(conn, dag_id=dag_id):
            raise DagNotFoundError(dag_id)
        rows = runs_of(conn, dag_id, state=state, limit=limit)
    if as_json:
        print_json(rows)
        return
    table = make_table(
        ("run_id", "type", "state", "logical date (UTC)", "started", "ended", "missed deadlines"),
        [
            (
                r["run_id"],
                r["run_type"] + (f" {r['backfill_id']}" if r["backfill_id"] else ""),
                _runs.styled(r["state"]),
                _short_time(r["logical_date"]),
                _short_time(r["start_date"]),
                _short_time(r["end_date"]),
                str(r["missed_deadlines"] or ""),
            )
            for r in rows
        ],
        title=f"Runs of {dag_id}",
    )
    console.print(table)


def _short_time(iso: str | None) -> str:
    """``2026-12-02 06:00`` for an ISO timestamp in UTC (the JSON keeps it whole)."""
    if iso is None:
        return ""
    from datetime import UTC, datetime

    return datetime.fromisoformat(iso).astimezone(UTC).strftime("%Y-%m-%d %H:%M")


@app.command("list-import-errors")
def list_import_errors(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Files that failed to import or hold invalid DAGs, with the line and reason."""
    from tailrace.cli._tables import make_table, relative
    from tailrace.config import dag_folders
    from tailrace.dags import import_errors
    from tailrace.db import read_only_engine

    s = settings()
    engine = _engine_with_dags(s)
    with read_only_engine(engine).connect() as conn:
        rows = sorted(import_errors(conn), key=lambda e: str(e["filename"]))
    if as_json:
        print_json(rows)
    elif not rows:
        console.print("[green]No import errors.[/]")
    else:
        from rich.markup import escape

        folders = dag_folders(s)
        table = make_table(
            ("file", "line", "error"),
            [
                (
                    escape(relative(r["filename"], folders)),
                    str(r["line"] or ""),
                    escape(r["message"]),
                )
                for r in rows
            ],
            title=f"Import errors (files relative to {folders[0]})",
            right=(1,),
            prose=(2,),
            show_lines=True,
        )
        console.print(table)
    if rows:
        raise typer.Exit(1)


def _set_paused(dag_id: str, paused: bool) -> None:
    from tailrace import actions
    from tailrace.notify import Wakeups

    s = settings()
    engine = database(s)
    actions.set_paused(engine, Wakeups(s.home, engine), dag_id, paused)
    console.print(f"DAG {dag_id} {'paused' if paused else 'unpaused'}")


@app.command()
def pause(dag_id: str) -> None:
    """Stop creating scheduled runs of a DAG."""
    _set_paused(dag_id, True)


@app.command()
def unpause(dag_id: str) -> None:
    """Resume creating scheduled runs of a DAG."""
    _set_paused(dag_id, False)


def _create_run(
    s: Settings, dag_id: str, conf: dict[str, Any], run_id: str | None, *, wake: bool
) -> tuple[Engine, int, str]:
    """Create a manual run of the DAG's latest version, parsing first only when the
    database does not reflect the DAG folders; a DAG whose file fails to import is said
    so, with the file's error."""
    from tailrace import actions
    from tailrace.dagrun import trigger_dag_run
    from tailrace.errors import DagNotFoundError
    from tailrace.notify import Wakeups

    engine = _engine_with_dags(s, dag_id)
    _warn_if_broken(s, engine, dag_id)
    try:
        if wake:
            pk, run_key = actions.trigger_run(
                engine,
                Wakeups(s.home, engine),
                dag_id,
                conf,
                run_id=run_id,
                max_conf_bytes=s.max_payload_bytes,
            )
        else:
            pk, run_key = trigger_dag_run(
                engine, dag_id, conf, run_id=run_id, max_conf_bytes=s.max_payload_bytes
            )
    except DagNotFoundError:
        _raise_import_error(s, engine, dag_id)
        raise
    return engine, pk, run_key


def _import_error(
    s: Settings, engine: Engine, dag_id: str, *, mentioned: bool = True
) -> tuple[str, int | None, str] | None:
    from tailrace.cli._parse import import_error_for
    from tailrace.cli._tables import relative
    from tailrace.config import dag_folders
    from tailrace.db import read_only_engine

    with read_only_engine(engine).connect() as conn:
        error = import_error_for(conn, dag_id, mentioned=mentioned)
    if error is None:
        return None
    line = error["line"]
    return (
        relative(str(error["filename"]), dag_folders(s)),
        line if isinstance(line, int) else None,
        str(error["message"]),
    )


def _raise_import_error(s: Settings, engine: Engine, dag_id: str) -> None:
    from tailrace.errors import DagImportError

    if (error := _import_error(s, engine, dag_id)) is not None:
        raise DagImportError(dag_id, *error) from None


def _warn_if_broken(s: Settings, engine: Engine, dag_id: str) -> None:
    """A known DAG whose file now fails to import runs its last good version: say so."""
    from tailrace.dagrun import latest_version
    from tailrace.db import read_only_engine
    from tailrace.errors import DagNotFoundError

    # Only the DAG's own file: another broken file that mentions it says nothing of it.
    error = _import_error(s, engine, dag_id, mentioned=False)
    if error is None:
        return
    with read_only_engine(engine).connect() as conn:
        try:
            latest_version(conn, dag_id)
        except DagNotFoundError:
            return  # not known at all: the trigger fails with the file's error
    filename, line, problem = error
    from rich.markup import escape

    where = f"{filename}, line {line}" if line else filename
    err_console.print(
        f"[yellow]Warning:[/] {escape(where)} fails to import ({escape(problem)}); "
        f"this run uses the last version of {dag_id} that parsed",
        soft_wrap=True,
        highlight=False,
    )


@app.command("trigger")
def trigger(
    dag_id: str,
    conf: str = typer.Option(None, "--conf", "-c", help="Run conf as a JSON object."),
    run_id: str = typer.Option(None, "--run-id", help="Default: manual__<timestamp>."),
    wait: bool = typer.Option(False, "--wait", help="Wait until the run finishes."),
    timeout: float = typer.Option(
        None, "--timeout", help="Give up waiting after this many seconds."
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print the run and its task instances as JSON."
    ),
    all_instances: bool = typer.Option(
        False,
        "--all-instances",
        help="With --json: list every instance of a mapped task, not the first 25 and a "
        "`mapped` summary.",
    ),
) -> None:
    """Create a manual run; a running scheduler (standalone or `tailrace scheduler`) runs it.

    Parses the DAG folders first only when the database does not reflect them (a new or
    changed file, or a DAG it does not know).
    """
    s = settings()
    _check_all_instances(all_instances, as_json)
    engine, pk, run_key = _create_run(s, dag_id, _conf(conf), run_id, wake=True)
    if not wait:
        if as_json:
            print_json(_runs.report(engine, pk, all_instances=all_instances))
        else:
            console.print(f"Created run [bold]{run_key}[/] of {dag_id}", highlight=False)
        return

    def slow() -> None:
        err_console.print(
            "[yellow]The run is still queued after 10s: is a scheduler running? "
            "Start one with `tailrace scheduler` or `tailrace standalone`.[/]"
        )

    finished = _runs.wait(engine, pk, timeout, on_slow=slow)
    _print_result(engine, pk, as_json, all_instances)
    if not finished:
        raise CliError(f"run {run_key} did not finish within {timeout}s")


def _check_all_instances(all_instances: bool, as_json: bool) -> None:
    if all_instances and not as_json:
        raise CliError(
            "--all-instances applies to --json output; the table lists the first "
            f"{_runs.INSTANCES_SHOWN} instances of a mapped task"
        )


def _print_result(engine: Engine, pk: int, as_json: bool, all_instances: bool = False) -> None:
    rep = _runs.report(engine, pk, all_instances=all_instances)
    if as_json:
        print_json(rep)
    else:
        console.print(_runs.headline(rep), highlight=False)
        console.print(_runs.task_table(rep))
        error = _runs.first_error(rep)
        if error is not None:
            from rich.markup import escape

            err_console.print(f"[red]Task {error[0]} failed:[/]\n{escape(error[1])}")
    if rep["state"] != "success":
        raise typer.Exit(1)


@app.command("test")
def test(
    dag_id: str,
    conf: str = typer.Option(None, "--conf", "-c", help="Run conf as a JSON object."),
    as_json: bool = typer.Option(False, "--json", help="Print the run as JSON."),
    all_instances: bool = typer.Option(
        False,
        "--all-instances",
        help="With --json: list every instance of a mapped task, not the first 25 and a "
        "`mapped` summary.",
    ),
) -> None:
    """Run one DAG run now with a private scheduler, workers and triggerer.

    Exits 0 only when the run succeeds.
    """
    from tailrace.standalone import make_scheduler, make_triggerer

    s = settings()
    _check_all_instances(all_instances, as_json)
    engine, pk, _ = _create_run(s, dag_id, _conf(conf), None, wake=False)
    scheduler = make_scheduler(s, engine, processes=min(2, s.worker_processes), only_runs={pk})
    triggerer = make_triggerer(s, engine, only_runs={pk})
    scheduler.on_triggers_changed = triggerer.wake
    triggerer.on_events = scheduler.events_arrived
    triggerer.on_asset_events = scheduler.asset_events_arrived
    scheduler.on_acks = triggerer.acks_arrived
    thread = triggerer.run_in_thread()
    try:
        with console.status(f"Running {dag_id} …"):
            # The run, then its DAG callbacks (a worker runs them once it has ended).
            scheduler.run_until(lambda: _runs.is_finished(engine, pk))
            scheduler.run_until(lambda: _runs.callbacks_done(engine, pk))
    finally:
        scheduler.stop()
        triggerer.stop()
        thread.join(timeout=30)
    _print_result(engine, pk, as_json, all_instances)
