"""The `tailrace` command line."""

from __future__ import annotations

import logging
from pathlib import Path

import typer
from rich.logging import RichHandler

from tailrace.cli import _connections, _dags, _db, _streams, _tasks, _triggers, _users
from tailrace.cli._common import CliError, err_console, set_overrides
from tailrace.sdk.errors import TailraceError

app = typer.Typer(
    help="Tailrace: a workflow orchestrator in which waiting is free and results stream.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(_db.app, name="db")
app.add_typer(_dags.app, name="dags")
app.add_typer(_tasks.app, name="tasks")
app.add_typer(_triggers.app, name="triggers")
app.add_typer(_streams.app, name="streams")
app.add_typer(_connections.app, name="connections")
app.add_typer(_users.app, name="users")


@app.callback()
def _root(
    dags_folder: Path = typer.Option(
        None, "--dags-folder", envvar="TAILRACE_DAGS_FOLDER", help="Folder of DAG files."
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log debug lines."),
) -> None:
    set_overrides(dags_folder=dags_folder)
    console_handler = RichHandler(console=err_console, show_path=False)
    # Task and trigger lines belong in task logs; the terminal shows warnings and worse.
    console_handler.setLevel(logging.DEBUG if verbose else logging.WARNING)
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(message)s",
        handlers=[console_handler],
    )


# Commands defined in their own modules register on ``app`` when imported.
from tailrace.cli import _demo_api, _fernet, _services, _worker  # noqa: E402, F401


def main() -> None:
    try:
        app()
    except (CliError, TailraceError) as exc:
        err_console.print(f"[bold red]Error:[/] {exc}")
        raise SystemExit(1) from None
