"""Long-running components: `standalone`, `scheduler`, `triggerer`; and `config`."""

from __future__ import annotations

import logging
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape

from tailrace.cli import app
from tailrace.cli._common import CliError, console, print_json, set_override, settings

if TYPE_CHECKING:
    from tailrace.config import Settings
    from tailrace.standalone import Services

# The settings `standalone` and `api-server` take as options too.
_HOST_HELP = "Serve the web UI and API on this address (api_host)."
_PORT_HELP = "Serve the web UI and API on this port (api_port)."


def _serve(services: Services, title: str) -> None:
    from tailrace.config import EXAMPLE_DAGS_FOLDER, dag_folders, mask_url_password
    from tailrace.metrics import logs

    s = services.settings
    logs.configure(
        s.log_format, services.component, verbose=logging.getLogger().level == logging.DEBUG
    )
    with console.status("Migrating the database and parsing DAGs …"):
        report = services.prepare()
    console.print(
        f"[bold]{title}[/] · database {escape(mask_url_password(s.database_url))}",
        soft_wrap=True,
    )
    if report is not None:
        folders = [
            "the bundled examples" if f == EXAMPLE_DAGS_FOLDER else escape(str(f))
            for f in dag_folders(s)
        ]
        console.print(
            f"DAGs from {' and '.join(folders)}: {report.dags} DAGs"
            + (
                f", [red]{report.import_errors} files with import errors[/] "
                "(see `tailrace dags list-import-errors`)"
                if report.import_errors
                else ""
            ),
            soft_wrap=True,
        )
    services.start()
    stop = services.should_stop
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    parts = []
    if services.scheduler is not None:
        parts.append(_scheduler_banner(s))
    if services.triggerer is not None:
        parts.append(f"triggerer running ({s.triggerer_capacity:,} triggers at most)")
    if services.api is not None:
        _print_api(services)
        if services.scheduler is None and services.triggerer is None:
            parts.append(
                "api-server running: the REST API, the web UI and the execution API "
                "Celery workers report to"
            )
    if services.metrics.port is not None:
        host = services.settings.metrics_host
        console.print(f"Metrics at http://{host}:{services.metrics.port}/metrics", soft_wrap=True)
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


def _scheduler_banner(s: Settings) -> str:
    """What the scheduler runs tasks with: its own worker processes, or the broker's."""
    if s.executor == "celery":
        from tailrace.config import mask_url_password

        return (
            "Scheduler running (Celery executor: tasks go to `tailrace worker`s through "
            f"{escape(mask_url_password(s.celery_broker_url or ''))}; a worker unheard for "
            f"{s.worker_lost_timeout:g}s is lost and its tries run again)"
        )
    return f"Scheduler running with {s.worker_processes} worker processes"


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


def _set_api_address(host: str | None, port: int | None) -> None:
    if host is not None:
        set_override("api_host", host, "--host")
    if port is not None:
        set_override("api_port", port, "--port")


@app.command()
def standalone(
    dags_folder: Path = typer.Option(
        None,
        "--dags-folder",
        help="Your DAG files (dags_folder); the bundled examples are parsed too unless "
        "--no-examples.",
    ),
    examples: bool = typer.Option(
        None,
        "--examples/--no-examples",
        help="Also run the bundled example DAGs (load_examples; standalone's default: yes).",
        show_default=False,
    ),
    host: str = typer.Option(None, "--host", help=_HOST_HELP),
    port: int = typer.Option(None, "--port", help=_PORT_HELP),
) -> None:
    """Run everything here: scheduler, workers, triggerer, web UI, your DAGs and the examples.

    SQLite under TAILRACE_HOME unless database_url says otherwise.
    """
    from tailrace.config import DEFAULT_SOURCE
    from tailrace.standalone import Services

    if dags_folder is not None:
        set_override("dags_folder", dags_folder, "--dags-folder")
    _set_api_address(host, port)
    if examples is not None:
        set_override("load_examples", examples, "--examples" if examples else "--no-examples")
    s = _checked("scheduler")
    if s.sources.get("load_examples", DEFAULT_SOURCE) == DEFAULT_SOURCE:
        from tailrace.config import override

        s = override(s, "load_examples", True, "standalone's default")
    _serve(
        Services(s, api_enabled=True, create_admin=True, demo_api=True),
        "Tailrace standalone",
    )


@app.command("api-server")
def api_server(
    host: str = typer.Option(None, "--host", help=_HOST_HELP),
    port: int = typer.Option(None, "--port", help=_PORT_HELP),
) -> None:
    """Run the REST API (on api_host:api_port) for the configured database."""
    from tailrace.standalone import Services

    _set_api_address(host, port)
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
    from tailrace.standalone import Services

    _serve(Services(_checked("scheduler"), triggerer_enabled=False), "Tailrace scheduler")


@app.command()
def triggerer() -> None:
    """Run a triggerer: the async loop where deferred tasks wait without a worker."""
    from tailrace.standalone import Services

    _serve(Services(_checked("triggerer"), scheduler_enabled=False), "Tailrace triggerer")


def _checked(component: str) -> Settings:
    """The settings, refused at once (naming what is missing) when a Celery deployment's
    component lacks what it needs."""
    from tailrace.config import check_celery_settings

    s = settings()
    check_celery_settings(s, component)
    return s


# COMPONENTS of tailrace.config, written out: the help must not import it.
_CHECK_HELP = (
    "Exit 1 unless the settings suit COMPONENT in a Celery deployment "
    "(scheduler, api-server, triggerer, worker); may repeat."
)


@app.command()
def config(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    check: list[str] = typer.Option([], "--check", metavar="COMPONENT", help=_CHECK_HELP),
) -> None:
    """Print the effective configuration, where each value came from, secrets masked."""
    from tailrace.config import DEFAULT_SOURCE

    s = settings()
    problems = _celery_problems(s, check or _components_to_check(s))
    values = s.masked()
    if as_json:
        print_json(
            {
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
    from tailrace.config import COMPONENTS

    return list(COMPONENTS) if s.executor == "celery" else []


def _celery_problems(s: Settings, components: list[str]) -> dict[str, str | None]:
    from tailrace.config import COMPONENTS, ConfigError, check_celery_settings

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
    from tailrace.cli._tables import make_table
    from tailrace.config import DEFAULT_SOURCE

    exists = s.config_file is not None and s.config_file.is_file()
    console.print(
        f"Config file: {escape(str(s.config_file))}" + ("" if exists else " [dim](absent)[/]"),
        soft_wrap=True,
    )
    rows = []
    for name, value in values.items():
        source = s.sources.get(name, DEFAULT_SOURCE)
        shown = f"[dim]{source}[/]" if source == DEFAULT_SOURCE else escape(source)
        rows.append((name, escape(str(value)), shown))
    console.print(
        make_table(
            ("setting", "value", "source"),
            rows,
            title="Effective configuration",
            keys=(0, 2),
            prose=(1,),
        )
    )
    if s.sources.get("load_examples", DEFAULT_SOURCE) == DEFAULT_SOURCE:
        console.print(
            "[dim]load_examples: `tailrace standalone` turns it on unless it is set "
            "(or --no-examples is given).[/]"
        )
    for component, problem in problems.items():
        if problem is None:
            console.print(f"[green]✓[/] {component}: ready for a Celery deployment")
        else:
            console.print(f"[red]✗[/] {escape(problem)}", soft_wrap=True)
