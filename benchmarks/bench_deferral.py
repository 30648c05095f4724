"""Deferral: round trip, triggerer capacity, and the worker time deferral saves.

    python -m benchmarks.bench_deferral round-trip [--tasks 100]
    python -m benchmarks.bench_deferral capacity [--triggers 100000] [--spread 60]
    python -m benchmarks.bench_deferral worker-time [--tasks 200] [--wait 60] [--workers 50]

Add --json for JSON, --database-url for PostgreSQL (default: SQLite, like standalone).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks._common import (
    database,
    harness,
    median,
    percentile,
    rss_mib,
    run_scenarios,
    workspace,
)

ROUND_TRIP_DAG = """
import time
from datetime import UTC, datetime
from tailrace import BaseOperator, chain, dag
from tailrace.sdk.triggers import DateTimeTrigger

class DeferOnce(BaseOperator):
    def execute(self, context):
        self.defer(
            trigger=DateTimeTrigger(datetime.now(UTC)),
            method_name="execute_complete",
            kwargs={"deferred_at": time.time()},
        )

    def execute_complete(self, context, event=None, deferred_at=None):
        return time.time() - deferred_at

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def round_trip():
    chain(*[DeferOnce(task_id=f"t{i}") for i in range(TASKS)])

round_trip()
"""

WORKER_TIME_DAG = """
import time
from datetime import datetime, timedelta
from tailrace import BaseSensorOperator, dag
from tailrace.sdk.triggers import TimeDeltaTrigger

class WaitFromStart(BaseSensorOperator):
    \"\"\"Waits WAIT seconds from its own start: poking in the worker, or in the triggerer.\"\"\"

    def execute(self, context, event=None, **kwargs):
        self._until = time.time() + WAIT
        return super().execute(context, event, **kwargs)

    def poke(self, context):
        return time.time() >= self._until

    def deferral_trigger(self, context):
        return TimeDeltaTrigger(timedelta(seconds=WAIT))

    def execute_complete(self, context, event=None):
        return None

@dag(schedule=None, start_date=datetime(2026, 1, 1), max_active_tasks=TASKS)
def blocking():
    for i in range(TASKS):
        WaitFromStart(task_id=f"s{i}", poke_interval=min(WAIT, 5.0))

@dag(schedule=None, start_date=datetime(2026, 1, 1), max_active_tasks=TASKS)
def deferrable():
    for i in range(TASKS):
        WaitFromStart(task_id=f"s{i}", deferrable=True)

blocking()
deferrable()
"""


def round_trip(args: argparse.Namespace) -> list[dict[str, Any]]:
    from sqlalchemy import select

    args.tasks = args.tasks or 100
    from tailrace.db.models import XCom
    from tailrace.serialization import loads

    samples: list[float] = []
    for _ in range(args.repeat):
        with workspace() as base, database(base, args.database_url) as url:
            source = ROUND_TRIP_DAG.replace("TASKS", str(args.tasks))
            with harness(base, url, source) as h:
                h.parse()
                h.start()
                pk = h.trigger("round_trip")
                assert h.run(pk, timeout=600)["state"] == "success"
                with h.engine.connect() as conn:
                    values = conn.scalars(select(XCom.value).where(XCom.dag_run_id == pk)).all()
                samples.extend(loads(v) * 1000 for v in values)
                h.engine.dispose()
    return [
        {
            "scenario": f"defer -> resumed method done ({args.tasks} chained tasks)",
            "runs": args.repeat,
            "median ms": median(samples),
            "p95 ms": percentile(samples, 0.95),
            "target": "median <= 20 ms",
        }
    ]


def _capacity_once(args: argparse.Namespace, spread: float) -> dict[str, Any]:
    from sqlalchemy import insert

    from tailrace.db import create_engine
    from tailrace.db.models import Trigger
    from tailrace.serialization import loads
    from tailrace.triggerer import Triggerer

    with workspace() as base, database(base, args.database_url) as url:
        engine = create_engine(url)
        lead = 10.0 + args.triggers / 5_000  # time to claim and start them all first
        start = datetime.now(UTC) + timedelta(seconds=lead)
        moments = [
            start + timedelta(seconds=spread * i / args.triggers) for i in range(args.triggers)
        ]
        with engine.begin() as conn:
            conn.execute(
                insert(Trigger),
                [
                    {
                        "classpath": "tailrace.sdk.triggers.DateTimeTrigger",
                        "kwargs": {"moment": m.isoformat()},
                        "created_at": datetime.now(UTC),
                    }
                    for m in moments
                ],
            )
        rss_before = rss_mib()
        triggerer = Triggerer(
            engine, log_folder=str(base / "logs"), capacity=args.triggers, lease_seconds=120
        )
        lags: list[float] = []
        done = threading.Event()

        def durable(batch: list[tuple[int, str]], at: float) -> None:
            for _, payload in batch:
                lags.append(at - datetime.fromisoformat(loads(payload)).timestamp())
            if len(lags) >= args.triggers:
                done.set()

        triggerer.on_durable = durable
        thread = triggerer.run_in_thread()
        claimed_by = time.time()
        while triggerer.stats.claimed < args.triggers:
            time.sleep(0.2)
        claimed_after = time.time() - claimed_by
        rss_running = rss_mib()
        finished = done.wait(timeout=lead + spread + 120)
        triggerer.stop()
        thread.join(timeout=120)
        engine.dispose()
    return {
        "claimed in s": claimed_after,
        "rss MiB": rss_running,
        "rss added MiB": rss_running - rss_before,
        "lags": lags,
        "complete": finished,
    }


def capacity(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for spread, label, target in (
        (
            args.spread,
            f"{args.triggers:,} sleeping triggers, moments over {args.spread:g}s",
            "RSS <= 1 GiB; p99 lag <= 100 ms",
        ),
        (0.0, f"{args.triggers:,} triggers due at the same instant", "all durable within 5 s"),
    ):
        r = _capacity_once(args, spread)
        lags = [x * 1000 for x in r["lags"]]
        rows.append(
            {
                "scenario": label,
                "events": f"{len(lags):,}",
                "rss MiB": r["rss MiB"],
                "p50 lag ms": median(lags),
                "p99 lag ms": percentile(lags, 0.99),
                "max lag ms": max(lags) if lags else float("nan"),
                "target": target,
            }
        )
    return rows


def worker_time(args: argparse.Namespace) -> list[dict[str, Any]]:
    args.tasks = args.tasks or 200
    rows = []
    results = {}
    for dag_id in ("blocking", "deferrable"):
        with workspace() as base, database(base, args.database_url) as url:
            source = WORKER_TIME_DAG.replace("TASKS", str(args.tasks)).replace(
                "WAIT", str(args.wait)
            )
            with harness(base, url, source, processes=args.workers, parallelism=args.tasks) as h:
                h.parse()
                h.start()
                began = time.monotonic()
                pk = h.trigger(dag_id)
                assert h.run(pk, timeout=args.wait * args.tasks + 600)["state"] == "success"
                wall = time.monotonic() - began
                results[dag_id] = (h.executor.busy_seconds, h.executor.peak_busy, wall)
                h.engine.dispose()
    blocking_busy = results["blocking"][0]
    for dag_id, (busy, peak, wall) in results.items():
        rows.append(
            {
                "scenario": f"{args.tasks} tasks waiting {args.wait:g}s, {dag_id}",
                "worker slot-seconds": busy,
                "peak busy workers": peak,
                "wall seconds": wall,
                "saving": "-"
                if dag_id == "blocking"
                else f"{100 * (1 - busy / blocking_busy):.1f}%",
            }
        )
    return rows


def options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tasks", type=int, default=None)
    p.add_argument("--triggers", type=int, default=100_000)
    p.add_argument("--spread", type=float, default=60.0)
    p.add_argument("--wait", type=float, default=60.0)
    p.add_argument("--workers", type=int, default=50)


def main(argv: list[str] | None = None) -> int:
    return run_scenarios(
        argv,
        __doc__.splitlines()[0],
        {
            "round-trip": ("Deferral round trip (SQLite standalone path)", round_trip),
            "capacity": ("Triggerer capacity (one process, one event loop)", capacity),
            "worker-time": ("Worker time: blocking sensor vs deferrable", worker_time),
        },
        options,
    )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
