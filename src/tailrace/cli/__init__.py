"""The `tailrace` command line.

Starting it imports typer, rich's console and the command definitions, nothing more:
each command imports what it needs (SQLAlchemy, the scheduler, the SDK …) when it runs,
so `tailrace --help` and `tailrace --version` answer at once. A test keeps it so.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import typer

from tailrace import __version__
from tailrace.cli import (
    _assets,
    _backfill,
    _connections,
    _dags,
    _db,
    _hitl,
    _pools,
    _streams,
    _tasks,
    _triggers,
    _users,
    _variables,
)
from tailrace.cli._common import CliError, err_console, set_overrides

app = typer.Typer(
    help="Tailrace: a workflow orchestrator in which waiting is free and results stream.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(_db.app, name="db")
app.add_typer(_dags.app, name="dags")
app.add_typer(_backfill.app, name="backfill")
app.add_typer(_tasks.app, name="tasks")
app.add_typer(_triggers.app, name="triggers")
app.add_typer(_streams.app, name="streams")
app.add_typer(_assets.app, name="assets")
app.add_typer(_connections.app, name="connections")
app.add_typer(_pools.app, name="pools")
app.add_typer(_variables.app, name="variables")
app.add_typer(_hitl.app, name="hitl")
app.add_typer(_users.app, name="users")


def _print_version(value: bool) -> None:
    if value:
        print(f"tailrace {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    dags_folder: Path = typer.Option(
        None, "--dags-folder", help="Folder of DAG files (else TAILRACE_DAGS_FOLDER)."
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log debug lines."),
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print Tailrace's version and exit.",
    ),
) -> None:
    from rich.logging import RichHandler

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


def _is_user_error(exc: BaseException) -> bool:
    """A CliError, or a TailraceError (whose module is loaded if one was raised)."""
    if isinstance(exc, CliError):
        return True
    errors = sys.modules.get("tailrace.sdk.errors")
    return errors is not None and isinstance(exc, errors.TailraceError)


def main() -> None:
    try:
        app()
    except Exception as exc:
        if not _is_user_error(exc):
            raise
        from rich.markup import escape

        err_console.print(f"[bold red]Error:[/] {escape(str(exc))}", highlight=False)
        raise SystemExit(1) from None
