from __future__ import annotations

import contextlib
import io
from datetime import datetime
from typing import Any

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


@app.command("clean")
def clean(
    clean_before_timestamp: str = typer.Option(
        ...,
        "--clean-before-timestamp",
        help="Purge what finished before this moment (ISO 8601; no time zone: UTC), "
        "e.g. 2026-11-01T00:00:00+00:00.",
    ),
    tables: str | None = typer.Option(
        None,
        "--tables",
        "-t",
        help="Tables to clean, comma-separated (default: all of them; see the docs).",
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Count what would go; delete nothing."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not prompt to confirm."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Print each batch."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Purge old records: finished runs and everything of theirs, trigger events, stream
    items, jobs and import errors, and the log files of what goes, in short batches."""
    import sys
    from datetime import UTC, datetime

    from tailrace.cleanup import CleanError, check_tables
    from tailrace.cleanup import clean as run_clean
    from tailrace.cli._common import CliError, database, print_json

    before = _moment(clean_before_timestamp)
    names = [t.strip() for t in tables.split(",") if t.strip()] if tables else None
    try:
        chosen = check_tables(names)
    except CleanError as exc:
        raise CliError(str(exc)) from None
    now = datetime.now(UTC)
    if before > now:
        raise CliError(
            f"--clean-before-timestamp {before.isoformat()} is in the future (now is "
            f"{now.isoformat(timespec='seconds')}): it would remove runs the moment they "
            "finish; pass a moment in the past"
        )
    if not dry_run and not yes:
        question = (
            f"Purge what finished before {before.isoformat()} from {', '.join(chosen)}? "
            "This cannot be undone (--dry-run counts first)"
        )
        if not sys.stdin.isatty():
            raise CliError(
                "refusing to purge without confirmation: there is no terminal to ask on; "
                "pass --yes (or --dry-run to count first)"
            )
        typer.confirm(question, abort=True)
    s = settings()
    engine = database(s)

    def progress(table: str, rows: int) -> None:
        if verbose and not as_json:
            console.print(f"  {escape(table)}: {rows} rows deleted", highlight=False)

    try:
        report = run_clean(
            engine,
            before,
            now=now,
            tables=chosen,
            dry_run=dry_run,
            log_folder=s.log_folder,
            on_batch=progress,
        )
    except CleanError as exc:
        raise CliError(str(exc)) from None
    finally:
        engine.dispose()
    if as_json:
        print_json(report.as_json())
        return
    _print_report(report)


def _moment(value: str) -> datetime:
    import pendulum

    from tailrace.cli._common import CliError

    try:
        parsed = pendulum.parse(value, tz="UTC")
    except (ValueError, pendulum.parsing.exceptions.ParserError) as exc:
        raise CliError(
            f"--clean-before-timestamp {value!r} is not a moment: {exc} "
            "(e.g. 2026-11-01T00:00:00+00:00)"
        ) from None
    if not isinstance(parsed, datetime):
        raise CliError(
            f"--clean-before-timestamp {value!r} is not a moment (e.g. 2026-11-01T00:00:00+00:00)"
        )
    return parsed.in_timezone("UTC")


def _print_report(report: Any) -> None:
    from tailrace.cleanup import describe_table
    from tailrace.cli._tables import make_table

    verb = "would go" if report.dry_run else "deleted"
    rows = [
        (r.table, escape(describe_table(r.table)), f"{r.rows:,}", f"{r.seconds:.2f}s")
        for r in report.results
    ]
    console.print(
        f"Finished before {report.before.isoformat()}"
        + (": dry run, nothing deleted" if report.dry_run else ""),
        highlight=False,
        soft_wrap=True,
    )
    console.print(
        make_table(("table", "what goes", f"rows {verb}", "took"), rows, right=(2, 3), prose=(1,))
    )
    if not report.dry_run:
        console.print(f"{report.log_files} log files removed", highlight=False)
        if report.vacuum:
            console.print(f"SQLite: {escape(report.vacuum)}", highlight=False, soft_wrap=True)
