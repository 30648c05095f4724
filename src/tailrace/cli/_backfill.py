"""`tailrace backfill`: Airflow 3's `backfill create`, and the pause, unpause, cancel and
list its REST API has."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import typer

from tailrace.cli._common import CliError, console, database, print_json, settings

if TYPE_CHECKING:
    from tailrace.store.backfills import BackfillRow

app = typer.Typer(
    help="Backfills: runs of a DAG for the past logical dates of a range, as in Airflow 3.",
    no_args_is_help=True,
)

REPROCESS = ("none", "failed", "completed")


def _date(value: str, option: str) -> datetime:
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise CliError(
            f"{option} {value!r} is not a date or time; write it like 2026-11-01 or "
            "2026-11-01T06:00:00+00:00"
        ) from None


def _print(row: BackfillRow, as_json: bool) -> None:
    if as_json:
        print_json(row.as_dict())
        return
    state = "complete" if row.completed_at else "paused" if row.is_paused else "running"
    console.print(
        f"Backfill {row.id} of {row.dag_id} ({row.from_date.isoformat()} to "
        f"{row.to_date.isoformat()}, reprocess {row.reprocess_behavior}, at most "
        f"{row.max_active_runs} at once): {state}",
        highlight=False,
    )


@app.command("create")
def create(
    dag_id: str = typer.Option(..., "--dag-id", help="The DAG to backfill."),
    from_date: str = typer.Option(
        ..., "--from-date", help="The first logical date (ISO; a date alone is midnight UTC)."
    ),
    to_date: str = typer.Option(..., "--to-date", help="The last logical date (included)."),
    reprocess_behavior: str = typer.Option(
        "none",
        "--reprocess-behavior",
        help="Dates with a finished run: none (leave them), failed (run failed ones "
        "again), completed (run them all again).",
    ),
    max_active_runs: int = typer.Option(
        10, "--max-active-runs", help="How many of the backfill's runs run at once."
    ),
    run_backwards: bool = typer.Option(
        False, "--run-backwards", help="Run the latest logical date first."
    ),
    dag_run_conf: str = typer.Option(None, "--dag-run-conf", help="Runs' conf, a JSON object."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Print the logical dates it would run, and create nothing."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Create the runs (run type backfill) for the logical dates the DAG's schedule has
    from --from-date to --to-date; a running scheduler starts them."""
    from tailrace import actions, backfills
    from tailrace.cli._dags import _conf, _engine_with_dags
    from tailrace.clock import utcnow
    from tailrace.notify import Wakeups

    if reprocess_behavior not in REPROCESS:
        raise CliError(
            f"--reprocess-behavior must be one of {', '.join(REPROCESS)}, not "
            f"{reprocess_behavior!r}"
        )
    request = backfills.BackfillRequest(
        dag_id=dag_id,
        from_date=_date(from_date, "--from-date"),
        to_date=_date(to_date, "--to-date"),
        reprocess_behavior=backfills.ReprocessBehavior(reprocess_behavior),
        max_active_runs=max_active_runs,
        run_backwards=run_backwards,
        dag_run_conf=_conf(dag_run_conf, "--dag-run-conf"),
    )
    s = settings()
    engine = _engine_with_dags(s, dag_id)
    if dry_run:
        dates = backfills.dry_run(engine, request, utcnow())
        if as_json:
            print_json([d.isoformat() for d in dates])
            return
        console.print(f"Logical dates a backfill of {dag_id} would run ({len(dates)}):")
        for date in dates:
            console.print(f"  {date.isoformat()}", highlight=False)
        return
    _print(actions.create_backfill(engine, Wakeups(s.home, engine), request), as_json)


@app.command("list")
def list_(
    dag_id: str = typer.Option(None, "--dag-id", help="Only this DAG's backfills."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Backfills, oldest first, with how far each has got."""
    from tailrace.cli._tables import make_table
    from tailrace.db import read_only_engine
    from tailrace.store import backfills as store

    with read_only_engine(database()).connect() as conn:
        rows = store.listed(conn, dag_id)
        runs = {r.id: store.dates(conn, r.id) for r in rows}
    if as_json:
        print_json([{**r.as_dict(), "dates": runs[r.id]} for r in rows])
        return
    table = make_table(
        ("id", "dag_id", "from", "to", "reprocess", "max active", "state", "runs"),
        [
            (
                str(r.id),
                r.dag_id,
                r.from_date.isoformat(),
                r.to_date.isoformat(),
                r.reprocess_behavior,
                str(r.max_active_runs),
                "complete" if r.completed_at else "paused" if r.is_paused else "running",
                _run_states(runs[r.id]),
            )
            for r in rows
        ],
        title="Backfills",
        right=(0, 5),
    )
    console.print(table)


def _run_states(dates: list[dict[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for d in dates:
        key = d["state"] or (d["exception_reason"] or "none")
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))


def _change(backfill_id: int, change: str, as_json: bool) -> None:
    from tailrace import actions
    from tailrace.notify import Wakeups

    s = settings()
    engine = database(s)
    _print(actions.change_backfill(engine, Wakeups(s.home, engine), backfill_id, change), as_json)


@app.command("pause")
def pause(
    backfill_id: int, as_json: bool = typer.Option(False, "--json", help="Print JSON.")
) -> None:
    """Its queued runs wait (those running go on)."""
    _change(backfill_id, "pause", as_json)


@app.command("unpause")
def unpause(
    backfill_id: int, as_json: bool = typer.Option(False, "--json", help="Print JSON.")
) -> None:
    """Its queued runs start again."""
    _change(backfill_id, "unpause", as_json)


@app.command("cancel")
def cancel(
    backfill_id: int, as_json: bool = typer.Option(False, "--json", help="Print JSON.")
) -> None:
    """Its queued runs fail without running (those running finish); it is complete."""
    _change(backfill_id, "cancel", as_json)
