from __future__ import annotations

import typer

from tailrace.cli._common import console, database, print_json, settings

app = typer.Typer(
    help="Look at assets, their events, and what asset-scheduled DAGs wait for.",
    no_args_is_help=True,
)


def _when(value: object) -> str:
    return "" if value is None else f"{value:%Y-%m-%d %H:%M:%S}"


@app.command("list")
def list_(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Assets with their events, the latest event, producers and consumers."""
    from rich.markup import escape

    from tailrace.assets import list_assets
    from tailrace.cli._tables import make_table
    from tailrace.db import read_only_engine

    with read_only_engine(database(settings())).connect() as conn:
        data = list_assets(conn)
    if as_json:
        print_json(data)
        return
    rows = [
        (
            # The URI under the name, when it differs: one column, the table fits 80.
            escape(a["name"] + (f"\n{a['uri']}" if a["uri"] != a["name"] else "")),
            str(a["events"]),
            _when(a["last_event_at"]),
            escape("\n".join(a["producers"])),
            escape("\n".join(a["consumers"])),
        )
        for a in data
    ]
    table = make_table(
        ("asset", "events", "last event", "producers", "consumers"),
        rows,
        title="Assets",
        keys=(0,),
        right=(1,),
    )
    console.print(table)


@app.command("events")
def events(
    asset: str = typer.Option(None, "--asset", help="Only this asset's events (its name)."),
    limit: int = typer.Option(50, "--limit", min=1, help="At most this many, newest first."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Asset events, newest first, with where each came from."""
    from rich.markup import escape

    from tailrace.assets import list_events
    from tailrace.cli._tables import make_table
    from tailrace.db import read_only_engine
    from tailrace.serialization import dumps

    with read_only_engine(database(settings())).connect() as conn:
        data = list_events(conn, asset=asset, limit=limit)
    if as_json:
        print_json(data)
        return
    rows = []
    for e in data:
        if e["source_dag_id"]:
            source = f"{e['source_dag_id']}.{e['source_task_id']}"
            source += f"[{e['source_map_index']}]" if e["source_map_index"] >= 0 else ""
        else:
            source = "external"
        if e["source_alias_name"]:
            source += f" (alias {e['source_alias_name']})"
        rows.append(
            (
                str(e["id"]),
                escape(e["asset"]),
                _when(e["timestamp"]),
                escape(source),
                escape(dumps(e["extra"]) if e["extra"] else ""),
            )
        )
    table = make_table(
        ("id", "asset", "time", "source", "extra"),
        rows,
        title="Asset events",
        keys=(0, 1),
        right=(0,),
    )
    console.print(table)
