from __future__ import annotations

import os

import typer
from rich.table import Table
from sqlalchemy import Engine

from tailrace.cli._common import CliError, console, settings
from tailrace.connections import add_connection, delete_connection, list_connections
from tailrace.db import create_engine, upgrade
from tailrace.sdk.connections import ENV_PREFIX, mask_url

app = typer.Typer(
    help="Named connections (URIs with credentials) that hooks look up by id.",
    no_args_is_help=True,
)


def _engine() -> Engine:
    engine = create_engine(settings().database_url)
    upgrade(engine)
    return engine


@app.command("add")
def add(
    conn_id: str = typer.Argument(..., help="The connection id hooks use, e.g. 'orders_api'."),
    uri: str = typer.Option(..., "--uri", help="scheme://login:password@host:port/schema?extra"),
    description: str = typer.Option(None, "--description"),
    replace: bool = typer.Option(False, "--replace", help="Overwrite an existing connection."),
) -> None:
    """Store a connection in the metadata database."""
    added = add_connection(_engine(), conn_id, uri, description, replace=replace)
    console.print(f"Connection {conn_id!r} added: {added.masked_uri}")


@app.command("list")
def list_(as_json: bool = typer.Option(False, "--json")) -> None:
    """Connections from the database and from TAILRACE_CONN_* variables; passwords masked.

    A variable wins over a stored connection of the same id.
    """
    stored = {c.conn_id: c for c in list_connections(_engine())}
    data: dict[str, dict[str, str | None]] = {
        c.conn_id: {
            "conn_id": c.conn_id,
            "uri": c.masked_uri,
            "description": c.description,
            "source": "database",
        }
        for c in stored.values()
    }
    for name, value in os.environ.items():
        if name.startswith(ENV_PREFIX) and len(name) > len(ENV_PREFIX):
            conn_id = name.removeprefix(ENV_PREFIX).lower()
            data[conn_id] = {
                "conn_id": conn_id,
                "uri": mask_url(value, extras=True),
                "description": None,
                "source": f"env {name}",
            }
    rows = [data[k] for k in sorted(data)]
    if as_json:
        console.print_json(data=rows)
        return
    table = Table(title="Connections")
    for column in ("conn_id", "uri", "source", "description"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["conn_id"], row["uri"], row["source"], row["description"] or "")
    console.print(table)


@app.command("delete")
def delete(conn_id: str = typer.Argument(...)) -> None:
    """Delete a stored connection."""
    if not delete_connection(_engine(), conn_id):
        raise CliError(f"no stored connection {conn_id!r}; see `tailrace connections list`")
    console.print(f"Connection {conn_id!r} deleted")
