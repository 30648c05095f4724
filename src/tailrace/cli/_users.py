from __future__ import annotations

import typer
from rich.table import Table

from tailrace.cli._common import CliError, console, settings
from tailrace.db import create_engine, read_only_engine, upgrade
from tailrace.scheduler import utcnow
from tailrace.users import create_user, list_users, parse_role

app = typer.Typer(help="Manage the users who log in to the API.", no_args_is_help=True)


@app.command("create")
def create(
    username: str,
    role: str = typer.Option(..., "--role", help="admin (may change things) or viewer (reads)."),
    password: str = typer.Option(
        ...,
        "--password",
        prompt=True,
        hide_input=True,
        confirmation_prompt=True,
        envvar="TAILRACE_NEW_USER_PASSWORD",
        help="Asked for when not given (or set TAILRACE_NEW_USER_PASSWORD).",
    ),
) -> None:
    """Create a user who can get API tokens with their username and password."""
    parse_role(role)
    if not password:
        raise CliError("the password must not be empty")
    engine = create_engine(settings().database_url)
    upgrade(engine)
    with engine.begin() as conn:
        create_user(conn, username, password, role, utcnow())
    console.print(f"Created {role} {username}")


@app.command("list")
def list_() -> None:
    """Users and their roles."""
    engine = create_engine(settings().database_url)
    upgrade(engine)
    with read_only_engine(engine).connect() as conn:
        users = list_users(conn)
    table = Table(title="Users")
    table.add_column("username")
    table.add_column("role")
    for username, role in users:
        table.add_row(username, role)
    console.print(table)
