"""Standalone under API read load: do hundreds of readers slow scheduling?

    python -m benchmarks.bench_api_load [--readers 200] [--seconds 30] [--runs 5]
        [--api-processes N] [--json]

Starts `tailrace standalone` (SQLite, 2 worker processes, `--api-processes` API processes:
default the setting's default) over a one-task DAG. First a
trivial run is timed `--runs` times with the API idle (trigger, as `tailrace dags trigger`
does, to the run's success). Then a second process opens `--readers` connections over
loopback, each reading DAG, run and task-instance pages back to back (one request in
flight per reader, `--think` seconds between them) for `--seconds`, and the same trivial
run is timed again meanwhile. Reported: requests, errors, latency median/p90/p99/max, and
trigger → success idle and under load (medians) with their ratio.

Targets (issue "hardening", defect 4): 0 errors, p99 <= 1 s, loaded <= 2x idle.
Numbers are from one machine with 2 cores: the readers, the API and the scheduler share
them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._common import database, emit, median, percentile, workspace

DAG = """
from datetime import datetime
from tailrace import dag, task

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def bench_api_load():
    @task
    def noop():
        return 1

    noop()

bench_api_load()
"""
DAG_ID = "bench_api_load"
READS = [
    "/api/v1/dags",
    f"/api/v1/dags/{DAG_ID}",
    f"/api/v1/dags/{DAG_ID}/runs?limit=25",
    "/api/v1/import-errors",
]
TOKEN_VARIABLE = "BENCH_API_TOKEN"
TARGET_P99 = 1.0
TARGET_RATIO = 2.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _token(api: str, home: Path) -> str:
    import httpx

    password = (home / "standalone_admin_password.txt").read_text().strip()
    reply = httpx.post(
        f"{api}/api/v1/auth/token", json={"username": "admin", "password": password}, timeout=30
    )
    reply.raise_for_status()
    return str(reply.json()["access_token"])


def _time_run(engine: Any, wakeups: Any) -> float:
    """Seconds from triggering a run (as the CLI does) to its success."""
    from sqlalchemy import select

    from tailrace import actions
    from tailrace.db.models import DagRun

    began = time.time()
    _, run_id = actions.trigger_run(engine, wakeups, DAG_ID, {})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            row = conn.execute(
                select(DagRun.state, DagRun.end_date).where(
                    DagRun.dag_id == DAG_ID, DagRun.run_id == run_id
                )
            ).one()
        if row.state == "success":
            return float(row.end_date.timestamp() - began)
        if row.state == "failed":
            raise RuntimeError(f"run {run_id} failed")
        time.sleep(0.005)  # polling the database, not synchronising a test
    raise TimeoutError(f"run {run_id} did not finish within 120 s")


async def _readers(
    api: str, readers: int, seconds: float, think: float, cap: int
) -> dict[str, Any]:
    import httpx

    headers = {"Authorization": f"Bearer {os.environ[TOKEN_VARIABLE]}"}
    latencies: list[float] = []
    errors: dict[str, int] = {}
    # A client (one connection) per reader, as separate browsers or scripts would be;
    # one shared pool of hundreds of connections costs the client more than the server.
    # All are made before the clock starts: each costs this process tens of milliseconds
    # (an SSL context), during which its loop reads no answers, and made by the readers
    # themselves they held up the others' first requests by seconds.
    clients = [
        httpx.AsyncClient(
            base_url=api, headers=headers, limits=httpx.Limits(max_connections=1), timeout=30.0
        )
        for _ in range(readers)
    ]

    async def reader(client: httpx.AsyncClient, offset: int) -> None:
        async with client:
            i = offset
            while time.monotonic() < deadline and len(latencies) < cap:
                began = time.perf_counter()
                try:
                    reply = await client.get(READS[i % len(READS)])
                    ok = reply.status_code == 200
                    kind = str(reply.status_code)
                except httpx.HTTPError as exc:
                    ok, kind = False, type(exc).__name__
                latencies.append(time.perf_counter() - began)
                if not ok:
                    errors[kind] = errors.get(kind, 0) + 1
                i += 1
                if think:
                    await asyncio.sleep(think)

    print("started", flush=True)
    began = time.monotonic()
    deadline = began + seconds
    await asyncio.gather(*(reader(client, n) for n, client in enumerate(clients)))
    elapsed = time.monotonic() - began
    return {"latencies": latencies, "errors": errors, "elapsed": elapsed}


def _load_process(args: argparse.Namespace) -> int:
    with _event_loop() as runner:
        result = runner.run(
            _readers(args.load_worker, args.readers, args.seconds, args.think, args.max_requests)
        )
    print(json.dumps(result), flush=True)
    return 0


def _event_loop() -> Any:
    try:
        import uvloop

        return asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        return asyncio.Runner()


def _measure(args: argparse.Namespace) -> dict[str, Any]:
    from tailrace.db import create_engine
    from tailrace.notify import Wakeups
    from tailrace.testing import component_env, start_component, stop_component

    with workspace() as base, database(base, args.database_url) as url:
        dags, home = base / "dags", base / "home"
        dags.mkdir()
        home.mkdir()
        (dags / "bench_api_load.py").write_text(DAG)
        port = _free_port()
        extra = {} if args.api_processes is None else {"api_processes": args.api_processes}
        env = component_env(url, dags, home=str(home), api_port=port, worker_processes=2, **extra)
        api = f"http://127.0.0.1:{port}"
        proc = start_component(env, "standalone", output=base / "standalone.log")
        engine = create_engine(url)
        wakeups = Wakeups(home, engine)
        try:
            token = _token(api, home)
            _time_run(engine, wakeups)  # warm: the workers have imported the DAG file
            idle = [_time_run(engine, wakeups) for _ in range(args.runs)]
            load = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.bench_api_load",
                    "--load-worker",
                    api,
                    "--readers",
                    str(args.readers),
                    "--seconds",
                    str(args.seconds),
                    "--think",
                    str(args.think),
                    "--max-requests",
                    str(args.max_requests),
                ],
                env={**os.environ, TOKEN_VARIABLE: token},
                stdout=subprocess.PIPE,
                text=True,
            )
            assert load.stdout is not None
            assert load.stdout.readline().strip() == "started"
            loaded: list[float] = []
            ends = time.monotonic() + args.seconds
            while time.monotonic() < ends and len(loaded) < args.runs:
                loaded.append(_time_run(engine, wakeups))
            out, _ = load.communicate(timeout=args.seconds + 120)
            reads = json.loads(out.strip().splitlines()[-1])
        finally:
            wakeups.close()
            engine.dispose()
            stop_component(proc)
    latencies = reads["latencies"]
    return {
        "api_processes": args.api_processes,
        "readers": args.readers,
        "seconds": round(reads["elapsed"], 1),
        "requests": len(latencies),
        "requests_per_s": len(latencies) / reads["elapsed"],
        "errors": sum(reads["errors"].values()),
        "error_kinds": reads["errors"],
        "latency_p50_ms": median(latencies) * 1000,
        "latency_p90_ms": percentile(latencies, 0.90) * 1000,
        "latency_p99_ms": percentile(latencies, 0.99) * 1000,
        "latency_max_ms": max(latencies, default=float("nan")) * 1000,
        "idle_run_ms": median(idle) * 1000,
        "loaded_run_ms": median(loaded) * 1000,
        "loaded_runs": len(loaded),
        "ratio": median(loaded) / median(idle),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument(
        "--database-url",
        default=None,
        help="PostgreSQL server URL to create a throwaway database on (default: SQLite)",
    )
    p.add_argument("--readers", type=int, default=200, help="concurrent API readers")
    p.add_argument("--seconds", type=float, default=30.0, help="how long the readers read")
    p.add_argument("--runs", type=int, default=5, help="trivial runs timed idle and loaded")
    p.add_argument(
        "--api-processes", type=int, default=None, help="api_processes (default: its default)"
    )
    p.add_argument("--think", type=float, default=0.0, help="each reader's pause between reads")
    p.add_argument("--max-requests", type=int, default=1_000_000, help="stop reading after")
    p.add_argument("--load-worker", metavar="API_URL", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.load_worker:
        return _load_process(args)
    result = _measure(args)
    if args.json:
        print(json.dumps({"benchmark": "api load", "results": [result]}, indent=2))
        return 0
    emit(
        f"standalone under {args.readers} API readers for {args.seconds:g} s", _table(result), False
    )
    return 0


def _table(r: dict[str, Any]) -> list[dict[str, Any]]:
    kinds = ", ".join(f"{k} x{n}" for k, n in r["error_kinds"].items())
    return [
        {
            "measure": "requests (per second)",
            "value": f"{r['requests']:,} ({r['requests_per_s']:,.0f}/s)",
            "target": "",
        },
        {
            "measure": "errors",
            "value": f"{r['errors']}" + (f" ({kinds})" if kinds else ""),
            "target": "0",
        },
        {"measure": "latency p50", "value": f"{r['latency_p50_ms']:,.0f} ms", "target": ""},
        {"measure": "latency p90", "value": f"{r['latency_p90_ms']:,.0f} ms", "target": ""},
        {
            "measure": "latency p99",
            "value": f"{r['latency_p99_ms']:,.0f} ms",
            "target": f"<= {TARGET_P99 * 1000:,.0f} ms",
        },
        {"measure": "latency max", "value": f"{r['latency_max_ms']:,.0f} ms", "target": ""},
        {"measure": "trivial run, API idle", "value": f"{r['idle_run_ms']:,.1f} ms", "target": ""},
        {
            "measure": f"trivial run, under load ({r['loaded_runs']})",
            "value": f"{r['loaded_run_ms']:,.1f} ms",
            "target": "",
        },
        {
            "measure": "loaded / idle",
            "value": f"{r['ratio']:.2f}x",
            "target": f"<= {TARGET_RATIO:g}x",
        },
    ]


if __name__ == "__main__":
    sys.exit(main())
