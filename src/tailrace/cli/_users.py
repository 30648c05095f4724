from __future__ import annotations

import typer

from tailrace.cli._common import CliError, console, database, print_json

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
        help="Asked for (twice, hidden) when not given; or set TAILRACE_NEW_USER_PASSWORD.",
    ),
) -> None:
    """Create a user who can get API tokens with their username and password."""
    from tailrace.clock import utcnow
    from tailrace.users import create_user, parse_role

    parse_role(role)
    if not password:
        raise CliError("the password must not be empty")
    with database().begin() as conn:
        create_user(conn, username, password, role, utcnow())
    console.print(f"Created {role} {username}", markup=False)


@app.command("list")
def list_(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Users and their roles."""
    from rich.markup import escape

    from tailrace.cli._tables import make_table
    from tailrace.db import read_only_engine
    from tailrace.users import list_users

    with read_only_engine(database()).connect() as conn:
        users = list_users(conn)
    if as_json:
        print_json([{"username": u, "role": str(r)} for u, r in users])
        return
    console.print(
        make_table(("username", "role"), [(escape(u), str(r)) for u, r in users], title="Users")
    )
