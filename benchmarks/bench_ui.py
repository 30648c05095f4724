"""The web UI's server time: the grid and run views of runs with 10,000 mapped instances.

    python -m benchmarks.bench_ui grid [--instances 10000] [--runs 1,25] [--requests 20]

Rows are inserted straight into a throwaway database (no scheduler runs); the API is
served in this process on loopback and each request is timed with httpx, so the figure is
the server's time plus one local round trip. Add --json for JSON, --database-url for
PostgreSQL (default: SQLite).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._common import database, harness, median, percentile, run_scenarios, workspace

DAG = """
from datetime import datetime
from tailrace import dag, task

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def bench_ui():
    @task
    def numbers():
        return []

    @task
    def double(n):
        return n * 2

    @task
    def total(values):
        return sum(values)

    total(double.expand(n=numbers()))

bench_ui()
"""
# A run in flight: most instances done, some running, the rest waiting.
MIX = [("success", 0.8), ("running", 0.04), ("failed", 0.01), ("queued", 0.05), (None, 0.10)]
TARGET_MS = 300.0


def _fill_run(engine: Any, instances: int) -> str:
    """A manual run whose mapped task has ``instances`` instances in a mix of states."""
    from sqlalchemy import delete, insert, update

    from tailrace.clock import utcnow
    from tailrace.dagrun import latest_version, ti_row, trigger_dag_run
    from tailrace.db.models import TaskInstance

    pk, run_id = trigger_dag_run(engine, "bench_ui", {})
    now = utcnow()
    with engine.begin() as conn:
        _, dag = latest_version(conn, "bench_ui")
        task = dag.task("double")
        conn.execute(
            delete(TaskInstance).where(
                TaskInstance.dag_run_id == pk, TaskInstance.task_id == "double"
            )
        )
        conn.execute(
            update(TaskInstance)
            .where(TaskInstance.dag_run_id == pk, TaskInstance.task_id == "numbers")
            .values(state="success")
        )
        rows, start = [], 0
        for state, share in MIX:
            count = round(instances * share) if state is not None else instances - start
            for i in range(start, start + count):
                row = {**ti_row(pk, "bench_ui", run_id, task, i, now), "state": state}
                if state == "failed":  # the run view shows the first failed one's error
                    row["error"] = f"Traceback (most recent call last):\nValueError: {i}\n"
                rows.append(row)
            start += count
        conn.execute(insert(TaskInstance), rows)
    return run_id


def _timed(client: Any, path: str, requests: int) -> list[float]:
    client.get(path).raise_for_status()  # warm: the DAG's structure is decoded once
    times = []
    for _ in range(requests):
        began = time.perf_counter()
        client.get(path).raise_for_status()
        times.append((time.perf_counter() - began) * 1000)
    return times


def _serve(base: Path, url: str, engine: Any) -> tuple[Any, Any, str]:
    """The API on a free loopback port, and a viewer's token."""
    from tailrace.api import ApiContext, ApiServer
    from tailrace.clock import utcnow
    from tailrace.config import load_settings
    from tailrace.notify import Wakeups
    from tailrace.users import create_user, issue_token

    settings = load_settings(
        {
            "TAILRACE_HOME": str(base),
            "TAILRACE_DATABASE_URL": url,
            "TAILRACE_DAGS_FOLDER": str(base / "dags"),
        }
    )
    with engine.begin() as conn:
        user = create_user(conn, "bench", "bench-password", "viewer", utcnow())
        token, _ = issue_token(conn, user, utcnow())
    ctx = ApiContext(settings, engine, Wakeups(base, engine))
    server = ApiServer(ctx, "127.0.0.1", 0)
    server.start()
    return ctx, server, token


def _measure(args: argparse.Namespace, runs: int) -> dict[str, list[float]]:
    import httpx

    with (
        workspace() as base,
        database(base, args.database_url) as url,
        harness(base, url, DAG) as h,
    ):
        h.parse()
        run_ids = [_fill_run(h.engine, args.instances) for _ in range(runs)]
        ctx, server, token = _serve(base, url, h.engine)
        try:
            with httpx.Client(
                base_url=f"{server.url}/api/v1",
                headers={"Authorization": f"Bearer {token}"},
                timeout=60,
            ) as client:
                first = client.get("/ui/dags/bench_ui/grid").json()["items"][0]
                assert first["tasks"]["double"]["total"] == args.instances, first
                return {
                    "grid": _timed(client, "/ui/dags/bench_ui/grid?limit=25", args.requests),
                    "run view": _timed(
                        client, f"/ui/dags/bench_ui/runs/{run_ids[-1]}", args.requests
                    ),
                }
        finally:
            server.stop()
            ctx.wakeups.close()
            h.engine.dispose()


def grid(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    backend = "PostgreSQL" if args.database_url else "SQLite"
    for runs in [int(n) for n in args.runs.split(",")]:
        samples: dict[str, list[float]] = {"grid": [], "run view": []}
        for _ in range(args.repeat):
            for view, times in _measure(args, runs).items():
                samples[view] += times
        for view, times in samples.items():
            rows.append(
                {
                    "scenario": f"{view}: {runs} run(s) x {args.instances:,} mapped, {backend}",
                    "median ms": median(times),
                    "p95 ms": percentile(times, 0.95),
                    "max ms": max(times),
                    "target": f"median < {TARGET_MS:g} ms",
                }
            )
    return rows


def options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--instances", type=int, default=10_000, help="mapped instances per run")
    p.add_argument("--runs", default="1,25", help="comma-separated run counts in the grid")
    p.add_argument("--requests", type=int, default=20, help="timed requests per repeat")


def main(argv: list[str] | None = None) -> int:
    return run_scenarios(
        argv,
        __doc__.splitlines()[0],
        {"grid": ("Web UI server time (grid and run view)", grid)},
        options,
    )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
