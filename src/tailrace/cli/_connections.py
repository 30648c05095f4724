from __future__ import annotations

import os

import typer

from tailrace.cli._common import CliError, console, database, print_json

app = typer.Typer(
    help="Named connections (URIs with credentials) that hooks look up by id.",
    no_args_is_help=True,
)


@app.command("add")
def add(
    conn_id: str = typer.Argument(..., help="The connection id hooks use, e.g. 'orders_api'."),
    uri: str = typer.Option(..., "--uri", help="scheme://login:password@host:port/schema?extra"),
    description: str = typer.Option(None, "--description"),
    replace: bool = typer.Option(False, "--replace", help="Overwrite an existing connection."),
) -> None:
    """Store a connection in the metadata database."""
    from tailrace.connections import add_connection

    added = add_connection(database(), conn_id, uri, description, replace=replace)
    console.print(f"Connection {conn_id!r} added: {added.masked_uri}", markup=False)


@app.command("list")
def list_(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Connections from the database and from TAILRACE_CONN_* variables; passwords masked.

    A variable wins over a stored connection of the same id.
    """
    from rich.markup import escape

    from tailrace.cli._tables import make_table
    from tailrace.connections import list_connections
    from tailrace.sdk.connections import ENV_PREFIX, mask_url

    data: dict[str, dict[str, str | None]] = {
        c.conn_id: {
            "conn_id": c.conn_id,
            "uri": c.masked_uri,
            "description": c.description,
            "source": "database",
        }
        for c in list_connections(database())
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
        print_json(rows)
        return
    table = make_table(
        ("conn_id", "uri", "source", "description"),
        [
            (
                escape(r["conn_id"] or ""),
                escape(r["uri"] or ""),
                escape(r["source"] or ""),
                escape(r["description"] or ""),
            )
            for r in rows
        ],
        title="Connections",
        prose=(3,),
    )
    console.print(table)


@app.command("delete")
def delete(conn_id: str = typer.Argument(...)) -> None:
    """Delete a stored connection."""
    from tailrace.connections import delete_connection

    if not delete_connection(database(), conn_id):
        raise CliError(f"no stored connection {conn_id!r}; see `tailrace connections list`")
    console.print(f"Connection {conn_id!r} deleted", markup=False)
