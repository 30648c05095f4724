"""Long-running components: `standalone`, `scheduler`, `triggerer`; and `config`."""

from __future__ import annotations

import signal

import typer
from rich.markup import escape
from rich.table import Table

from tailrace.cli import app
from tailrace.cli._common import CliError, console, settings
from tailrace.config import (
    COMPONENTS,
    DEFAULT_SOURCE,
    ConfigError,
    Settings,
    check_celery_settings,
    mask_url_password,
)
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
    stop = services.should_stop
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
    if services.failure is not None:
        raise CliError(f"stopped: {services.failure}")


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
        Services(_checked("scheduler"), api_enabled=True, create_admin=True, demo_api=True),
        "Tailrace standalone",
    )


@app.command("api-server")
def api_server() -> None:
    """Run the REST API (on api_host:api_port) for the configured database."""
    _serve(
        Services(
            _checked("api-server"),
            scheduler_enabled=False,
            triggerer_enabled=False,
            api_enabled=True,
        ),
        "Tailrace API server",
    )


@app.command()
def scheduler() -> None:
    """Run the scheduler (with its local workers and the DAG parser)."""
    _serve(Services(_checked("scheduler"), triggerer_enabled=False), "Tailrace scheduler")


@app.command()
def triggerer() -> None:
    """Run a triggerer: the async loop where deferred tasks wait without a worker."""
    _serve(Services(_checked("triggerer"), scheduler_enabled=False), "Tailrace triggerer")


def _checked(component: str) -> Settings:
    """The settings, refused at once (naming what is missing) when a Celery deployment's
    component lacks what it needs."""
    s = settings()
    check_celery_settings(s, component)
    return s


_CHECK_HELP = (
    "Exit 1 unless the settings suit COMPONENT in a Celery deployment "
    f"({', '.join(COMPONENTS)}); may repeat."
)


@app.command()
def config(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    check: list[str] = typer.Option([], "--check", metavar="COMPONENT", help=_CHECK_HELP),
) -> None:
    """Print the effective configuration, where each value came from, secrets masked."""
    s = settings()
    problems = _celery_problems(s, check or _components_to_check(s))
    values = s.masked()
    if as_json:
        console.print_json(
            data={
                "config_file": str(s.config_file) if s.config_file else None,
                "settings": {
                    name: {"value": value, "source": s.sources.get(name, DEFAULT_SOURCE)}
                    for name, value in values.items()
                },
                "celery_checks": problems,
            }
        )
    else:
        _print_config_table(s, values, problems)
    if check and any(problems[component] for component in check):
        raise typer.Exit(1)


def _components_to_check(s: Settings) -> list[str]:
    return list(COMPONENTS) if s.executor == "celery" else []


def _celery_problems(s: Settings, components: list[str]) -> dict[str, str | None]:
    if unknown := [c for c in components if c not in COMPONENTS]:
        raise CliError(f"--check {unknown[0]}: not a component; known: {', '.join(COMPONENTS)}")
    problems: dict[str, str | None] = {}
    for component in components:
        try:
            check_celery_settings(s, component)
        except ConfigError as exc:
            problems[component] = str(exc)
        else:
            problems[component] = None
    return problems


def _print_config_table(
    s: Settings, values: dict[str, object], problems: dict[str, str | None]
) -> None:
    exists = s.config_file is not None and s.config_file.is_file()
    console.print(
        f"Config file: {escape(str(s.config_file))}" + ("" if exists else " [dim](absent)[/]"),
        soft_wrap=True,
    )
    table = Table(title="Effective configuration")
    table.add_column("setting")
    table.add_column("value", overflow="fold")
    table.add_column("source", overflow="fold")
    for name, value in values.items():
        source = s.sources.get(name, DEFAULT_SOURCE)
        shown = f"[dim]{source}[/]" if source == DEFAULT_SOURCE else escape(source)
        table.add_row(name, escape(str(value)), shown)
    console.print(table)
    for component, problem in problems.items():
        if problem is None:
            console.print(f"[green]✓[/] {component}: ready for a Celery deployment")
        else:
            console.print(f"[red]✗[/] {escape(problem)}", soft_wrap=True)
