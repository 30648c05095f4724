"""Long-running components: `standalone`, `scheduler`, `triggerer`; and `config`."""

from __future__ import annotations

import signal
import threading

import typer
from rich.table import Table

from tailrace.cli import app
from tailrace.cli._common import console, settings
from tailrace.config import mask_url_password
from tailrace.standalone import Services


def _serve(services: Services, title: str) -> None:
    s = services.settings
    with console.status("Migrating the database and parsing DAGs …"):
        report = services.prepare()
    console.print(f"[bold]{title}[/] · database {mask_url_password(s.database_url)}")
    if report is not None:
        console.print(
            f"DAGs folder {s.dags_folder}: {report.dags} DAGs"
            + (
                f", [red]{report.import_errors} files with import errors[/] "
                "(see `tailrace dags list-import-errors`)"
                if report.import_errors
                else ""
            )
        )
    services.start()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    parts = []
    if services.scheduler is not None:
        parts.append(f"Scheduler running with {s.worker_processes} worker processes")
    if services.triggerer is not None:
        parts.append(f"triggerer running ({s.triggerer_capacity:,} triggers at most)")
    if services.api is not None:
        _print_api(services)
    if services.demo_api_url is not None:
        console.print(
            f"Demo API for the examples at {services.demo_api_url} "
            "(the connection demo_api; set TAILRACE_CONN_DEMO_API to use another)",
            soft_wrap=True,
        )
    console.print("; ".join(parts or ["Running"]) + ". Ctrl-C stops.")
    if services.scheduler is not None:
        console.print(
            "Trigger a run: [bold]tailrace dags trigger DAG_ID --wait[/] "
            "(DAG ids: `tailrace dags list`)"
        )
    stop.wait()
    with console.status("Stopping …"):
        services.stop()


def _print_api(services: Services) -> None:
    assert services.api is not None
    url = services.api.url
    console.print(
        f"\n[bold]Tailrace web UI: [link={url}/]{url}/[/link][/]", soft_wrap=True, highlight=False
    )
    admin = services.admin
    if admin is None:
        console.print("Log in as a user from `tailrace users create USERNAME --role admin|viewer`")
    elif admin.created or admin.password_file.exists():
        console.print(
            f"Log in as [bold]{admin.username}[/] with the password in {admin.password_file}",
            soft_wrap=True,
        )
    else:
        console.print(f"Log in as [bold]{admin.username}[/] with the password you gave it")
    console.print(f"REST API at {url}/api/v1 (documentation: {url}/docs)\n", soft_wrap=True)


@app.command()
def standalone() -> None:
    """Run everything on this machine: SQLite, scheduler, workers, triggerer, the API, example
    DAGs."""
    _serve(
        Services(settings(), api_enabled=True, create_admin=True, demo_api=True),
        "Tailrace standalone",
    )


@app.command("api-server")
def api_server() -> None:
    """Run the REST API (on api_host:api_port) for the configured database."""
    _serve(
        Services(settings(), scheduler_enabled=False, triggerer_enabled=False, api_enabled=True),
        "Tailrace API server",
    )


@app.command()
def scheduler() -> None:
    """Run the scheduler (with its local workers and the DAG parser)."""
    _serve(Services(settings(), triggerer_enabled=False), "Tailrace scheduler")


@app.command()
def triggerer() -> None:
    """Run a triggerer: the async loop where deferred tasks wait without a worker."""
    _serve(Services(settings(), scheduler_enabled=False), "Tailrace triggerer")


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
