from __future__ import annotations

import contextlib
import io

import typer
from rich.markup import escape

from tailrace.cli._common import console, settings

app = typer.Typer(help="Manage the metadata database.", no_args_is_help=True)


@app.command()
def migrate(
    sql: bool = typer.Option(
        False,
        "--sql",
        help="Print the SQL the upgrade would run (Alembic offline mode); change nothing.",
    ),
) -> None:
    """Create the database or bring it up to the current schema (no data is lost)."""
    from tailrace.config import mask_url_password
    from tailrace.db import (
        DatabaseNotMigratedError,
        check_schema,
        create_engine,
        current_revision,
        upgrade,
    )

    s = settings()
    safe_url = mask_url_password(s.database_url)
    engine = create_engine(s.database_url)
    try:
        with contextlib.suppress(DatabaseNotMigratedError):
            check_schema(engine)  # a database from a newer Tailrace raises here
        current = current_revision(engine)
    finally:
        engine.dispose()
    steps = _steps(current)
    if sql:
        if steps:
            _print_sql(s.database_url, current)
        else:
            console.print(f"-- at revision {current} (the newest): nothing to do", markup=False)
        return
    if not steps:
        console.print(
            f"[green]Database {escape(safe_url)} is at revision {current} (the newest)[/]"
        )
        return
    head = steps[-1][0]
    console.print(
        f"Database {escape(safe_url)} is "
        + (f"at revision {current}" if current else "empty")
        + f"; migrating to {head} in {len(steps)} step{'s' if len(steps) > 1 else ''}, "
        "one transaction:",
        soft_wrap=True,
    )
    engine = create_engine(s.database_url)
    try:
        with console.status("Migrating …"):
            upgrade(engine)
        for revision, down, doc in steps:
            console.print(
                f"  [green]✓[/] {down or 'empty'} → {revision}  {escape(doc)}", soft_wrap=True
            )
        console.print(f"[green]Database is at revision {current_revision(engine)}[/]")
    finally:
        engine.dispose()


def _steps(current: str | None) -> list[tuple[str, str | None, str]]:
    """(revision, its predecessor, the first line of its docstring), oldest first."""
    from alembic.script import ScriptDirectory

    from tailrace.db.migrate import alembic_config

    script = ScriptDirectory.from_config(alembic_config())
    revisions = script.iterate_revisions("heads", current or "base")
    steps = []
    for revision in reversed(list(revisions)):
        if revision is None or revision.revision == current:
            continue
        down = revision.down_revision
        doc = (revision.doc or "").strip().splitlines()
        summary = doc[0] if doc else ""
        steps.append((revision.revision, down if isinstance(down, str) else None, summary))
    return steps


def _print_sql(database_url: str, current: str | None) -> None:
    from alembic import command

    from tailrace.db import normalize_url
    from tailrace.db.migrate import alembic_config

    config = alembic_config()
    url = normalize_url(database_url).render_as_string(hide_password=False)
    # Offline mode only needs the dialect; Config values go through % interpolation.
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    buffer = io.StringIO()
    config.output_buffer = buffer
    command.upgrade(config, f"{current}:head" if current else "head", sql=True)
    console.print(buffer.getvalue(), markup=False, highlight=False, soft_wrap=True, end="")


@app.command("reset")
def reset_(yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask.")) -> None:
    """Drop every table and migrate from scratch: ALL DATA IS LOST."""
    from tailrace.config import mask_url_password
    from tailrace.db import create_engine, current_revision, reset

    s = settings()
    if not yes:
        typer.confirm(f"Delete all data in {mask_url_password(s.database_url)}?", abort=True)
    engine = create_engine(s.database_url)
    reset(engine)
    console.print(f"[green]Database reset to revision {current_revision(engine)}[/]")
