"""`tailrace db clean` of a million rows while a scheduler runs: how long, and what it costs
the scheduler's passes.

    python -m benchmarks.bench_clean [--rows 1000000] [--runs 1000] [--repeat 3] [--json]

Each repeat stores ``--rows`` rows — half trigger events, half stream items — for
``--runs`` finished runs (one streaming task each: its trigger, its events, its output
stream), starts a scheduler, a triggerer and workers in this process with an endless
stream flowing through them, measures the scheduler's passes for a while, then runs
``tailrace db clean --clean-before-timestamp NOW --yes --json`` as its own process (as an
operator would) and measures the passes again until it exits. Reported, as medians over
the repeats: the clean's wall time (the process, start-up included) and its own time, the
passes' p50/p99/max before and during the clean, the database file before and after.
The issue's targets (SQLite): ≤ 10 s, no pass over 250 ms meanwhile.

Add --database-url for PostgreSQL (default: SQLite).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from benchmarks._common import database, emit, median, parser, percentile, workspace
from benchmarks.bench_soak import Passes, db_bytes, load_average, soak_harness

CHUNK = 50_000
CLEAN = [sys.executable, "-m", "tailrace", "db", "clean", "--yes", "--json"]


def seed(h: Any, rows: int, runs: int) -> float:
    """Store ``rows`` events and items for ``runs`` copies of one finished run; returns the
    seconds it took."""
    from sqlalchemy import insert, select

    from tailrace.db.models import DagRun, Stream, StreamItem, TaskInstance, Trigger, TriggerEvent

    template = h.trigger("short")
    h.run(template, timeout=120)
    began = time.perf_counter()
    per_run = rows // 2 // runs
    ended = datetime.now(UTC) - timedelta(hours=1)
    with h.engine.begin() as conn:
        run = dict(conn.execute(select(DagRun).where(DagRun.id == template)).mappings().one())
        ti = dict(
            conn.execute(
                select(TaskInstance).where(
                    TaskInstance.dag_run_id == template, TaskInstance.task_id == "collect"
                )
            )
            .mappings()
            .one()
        )
    for column in ("id", "trigger_id"):
        run.pop(column, None)
        ti.pop(column, None)
    events: list[dict[str, Any]] = []
    items: list[dict[str, Any]] = []
    for n in range(runs):
        with h.engine.begin() as conn:
            run_pk = conn.execute(
                insert(DagRun)
                .values({**run, "run_id": f"seeded__{n}", "end_date": ended})
                .returning(DagRun.id)
            ).scalar_one()
            trigger_id = conn.execute(
                insert(Trigger)
                .values(
                    classpath="seeded.Trigger",
                    kwargs={},
                    created_at=ended,
                    completed=True,
                    next_sequence=per_run,
                    acked_sequence=per_run - 1,
                    # As if stored before live pruning (an upgraded database): left for
                    # db clean, not pruned by the running scheduler meanwhile.
                    pruned_sequence=per_run - 1,
                )
                .returning(Trigger.id)
            ).scalar_one()
            ti_pk = conn.execute(
                insert(TaskInstance)
                .values({**ti, "dag_run_id": run_pk, "run_id": f"seeded__{n}"})
                .values(trigger_id=trigger_id, end_date=ended)
                .returning(TaskInstance.id)
            ).scalar_one()
            stream_id = conn.execute(
                insert(Stream)
                .values(task_instance_id=ti_pk, closed=True, length=per_run, created_at=ended)
                .returning(Stream.id)
            ).scalar_one()
        events.extend(
            {
                "trigger_id": trigger_id,
                "trigger_run_id": "seeded",
                "sequence_index": i,
                "payload": '{"i": 1}',
                "created_at": ended,
            }
            for i in range(per_run)
        )
        items.extend(
            {"stream_id": stream_id, "index": i, "value": '{"i": 1}'} for i in range(per_run)
        )
        if len(events) >= CHUNK or n == runs - 1:
            with h.engine.begin() as conn:
                conn.execute(insert(TriggerEvent), events)
                conn.execute(insert(StreamItem), items)
            events, items = [], []
    return time.perf_counter() - began


def once(args: argparse.Namespace) -> dict[str, Any]:
    from tailrace.testing import component_env

    with workspace() as base, database(base, args.database_url) as url:
        h = soak_harness(base, url, 7 * 24 * 3600)
        try:
            h.parse()
            seed_seconds = seed(h, args.rows, args.runs)
            size_before = db_bytes(url)
            env = component_env(url, base / "dags", log_folder=base / "logs")
            with h.running():
                h.trigger("endless")
                passes = Passes(h.scheduler)
                time.sleep(args.baseline)  # the stream flowing, nothing else: the baseline
                quiet = passes.take()
                moment = datetime.now(UTC).isoformat()
                t0 = time.perf_counter()
                spy = [args.py_spy, "record", "--idle", "-f", "raw", "-r", "200"]
                profile = [*spy, "-o", args.profile, "--"] if args.profile else []
                done = subprocess.run(
                    [*profile, *CLEAN, "--clean-before-timestamp", moment],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=False,
                )
                wall = time.perf_counter() - t0
                during = passes.take()
            if done.returncode != 0:
                raise RuntimeError(f"db clean failed: {done.stderr or done.stdout}")
            # py-spy (--profile) may print around the report.
            report, _ = json.JSONDecoder().raw_decode(done.stdout[done.stdout.index("{") :])
        finally:
            h.close()
        deleted = {t["table"]: t["rows"] for t in report["tables"]}
        return {
            "seed_seconds": seed_seconds,
            "clean_wall_seconds": wall,
            "clean_seconds": report["seconds"],
            "deleted": deleted["trigger_event"] + deleted["stream_item"],
            "quiet_passes": len(quiet),
            "quiet_p50_ms": percentile(quiet, 0.5) * 1000,
            "quiet_p99_ms": percentile(quiet, 0.99) * 1000,
            "quiet_max_ms": max(quiet, default=float("nan")) * 1000,
            "passes": len(during),
            "p50_ms": percentile(during, 0.5) * 1000,
            "p99_ms": percentile(during, 0.99) * 1000,
            "max_ms": max(during, default=float("nan")) * 1000,
            "db_mib_before": size_before / 2**20,
            "db_mib_after": db_bytes(url) / 2**20,
            "vacuum": report["vacuum"],
        }


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.split("\n", 1)[0] if __doc__ else "db clean")
    p.add_argument("--rows", type=int, default=1_000_000, help="events + items stored")
    p.add_argument("--runs", type=int, default=1000, help="finished runs they belong to")
    p.add_argument("--baseline", type=float, default=5.0, help="seconds of passes without clean")
    p.add_argument("--profile", help="record the clean process with py-spy into this file (raw)")
    p.add_argument("--py-spy", default="py-spy", help="the py-spy executable (with --profile)")
    args = p.parse_args(argv)
    load_before = load_average()
    results = [once(args) for _ in range(args.repeat)]
    title = (
        f"db clean of {args.rows:,} events + items of {args.runs:,} runs, "
        f"{'PostgreSQL' if args.database_url else 'SQLite'}, medians of {args.repeat} "
        f"(load {load_before} → {load_average()})"
    )
    if args.json:
        print(json.dumps({"benchmark": title, "runs": results}, indent=2, default=str))
        return 0

    def med(key: str) -> float:
        return median([r[key] for r in results])

    rows = [
        {
            "measure": "clean, wall (process)",
            "value": f"{med('clean_wall_seconds'):.2f} s",
            "target": "≤ 10 s",
        },
        {"measure": "clean, its own time", "value": f"{med('clean_seconds'):.2f} s", "target": ""},
        {"measure": "rows deleted", "value": f"{med('deleted'):,.0f}", "target": ""},
        {
            "measure": "passes during clean (p50 / p99 / max)",
            "value": f"{med('p50_ms'):.0f} / {med('p99_ms'):.0f} / {med('max_ms'):.0f} ms "
            f"({med('passes'):.0f} passes)",
            "target": "max ≤ 250 ms",
        },
        {
            "measure": "passes before it (p50 / p99 / max)",
            "value": f"{med('quiet_p50_ms'):.0f} / {med('quiet_p99_ms'):.0f} / "
            f"{med('quiet_max_ms'):.0f} ms ({med('quiet_passes'):.0f} passes)",
            "target": "",
        },
        {
            "measure": "database file + WAL",
            "value": f"{med('db_mib_before'):.1f} → {med('db_mib_after'):.1f} MiB",
            "target": "",
        },
        {
            "measure": "longest pass of each repeat",
            "value": ", ".join(f"{r['max_ms']:.0f}" for r in results) + " ms",
            "target": "",
        },
        {
            "measure": "clean wall time of each repeat",
            "value": ", ".join(f"{r['clean_wall_seconds']:.2f}" for r in results) + " s",
            "target": "",
        },
    ]
    emit(title, rows, False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
