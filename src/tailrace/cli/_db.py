from __future__ import annotations

import typer

from tailrace.cli._common import console, settings
from tailrace.db import create_engine, current_revision, reset, upgrade

app = typer.Typer(help="Manage the metadata database.", no_args_is_help=True)


@app.command()
def migrate() -> None:
    """Create the database or bring it up to the current schema (no data is lost)."""
    s = settings()
    engine = create_engine(s.database_url)
    upgrade(engine)
    console.print(f"[green]Database is at revision {current_revision(engine)}[/] ({_safe(s)})")


@app.command("reset")
def reset_(yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask.")) -> None:
    """Drop every table and migrate from scratch: ALL DATA IS LOST."""
    s = settings()
    if not yes:
        typer.confirm(f"Delete all data in {_safe(s)}?", abort=True)
    engine = create_engine(s.database_url)
    reset(engine)
    console.print(f"[green]Database reset to revision {current_revision(engine)}[/]")


def _safe(s: object) -> str:
    from tailrace.config import mask_url_password

    return mask_url_password(s.database_url)  # type: ignore[attr-defined]
