"""Long-running components: `standalone`, `scheduler`; and `config`."""

from __future__ import annotations

import signal
import threading

import typer
from rich.table import Table

from tailrace.cli import app
from tailrace.cli._common import console, settings
from tailrace.standalone import SchedulerService


def _serve(service: SchedulerService, title: str) -> None:
    s = service.settings
    with console.status("Migrating the database and parsing DAGs …"):
        report = service.prepare()
    console.print(
        f"[bold]{title}[/] · database {_masked(s.database_url)} · dags {s.dags_folder}\n"
        f"Found {report.dags} DAGs"
        + (
            f", [red]{report.import_errors} files with import errors[/] "
            "(see `tailrace dags list-import-errors`)"
            if report.import_errors
            else ""
        )
    )
    service.start()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    console.print(
        f"Scheduler running with {s.worker_processes} worker processes. "
        "Trigger a run: [bold]tailrace dags trigger example_etl --wait[/]. Ctrl-C stops."
    )
    stop.wait()
    with console.status("Stopping …"):
        service.stop()


def _masked(url: str) -> str:
    from tailrace.config import mask_url_password

    return mask_url_password(url)


@app.command()
def standalone() -> None:
    """Run everything on this machine: SQLite, scheduler, workers, example DAGs."""
    _serve(SchedulerService(settings()), "Tailrace standalone")


@app.command()
def scheduler() -> None:
    """Run the scheduler (with its local workers and the DAG parser)."""
    _serve(SchedulerService(settings()), "Tailrace scheduler")


@app.command()
def config(as_json: bool = typer.Option(False, "--json")) -> None:
    """Print the effective configuration, secrets masked."""
    values = settings().masked()
    if as_json:
        console.print_json(data={k: str(v) if v is not None else None for k, v in values.items()})
        return
    table = Table(title="Effective configuration")
    table.add_column("setting")
    table.add_column("value", overflow="fold")
    for key, value in values.items():
        table.add_row(key, str(value))
    console.print(table)
