"""Scheduler throughput and hop latency, end to end through the real scheduler and workers.

    python benchmarks/bench_scheduler.py [--repeat 3] [--json] [--database-url URL]
        [--scenario mapped_2000 ...]

Scenarios (issue: foundation):
- 1,000 independent no-op tasks in one run: tasks per second from trigger to run success.
- 2,000 mapped no-op task instances (one task, `.expand()` over a list): instances per
  second from trigger to run success.
- a chain of 200 no-op tasks: tasks per second, and the hop latency — upstream task's end
  (as its worker reported it) to downstream task's start — median and p95.
Targets on the 2-core machine: >= 300 tasks/s; hop median <= 20 ms; 2,000 mapped
instances >= 1,500/s on SQLite, >= 800/s on PostgreSQL (issue 13).
"""

from __future__ import annotations

import sys
import time
from datetime import datetime
from pathlib import Path

from benchmarks._common import database, emit, median, parser, percentile, workspace


def dag_source(chain_length: int = 200) -> str:
    """1,000 independent no-op tasks (``wide_1000``) and a chain (``chain_<length>``)."""
    return f"""
from datetime import datetime
from tailrace import DAG, chain
from tailrace.sdk.operators.python import PythonOperator

def noop(*args):
    return None

with DAG("wide_1000", schedule=None, start_date=datetime(2026, 1, 1), max_active_tasks=1000):
    for i in range(1000):
        PythonOperator(task_id=f"t{{i}}", python_callable=noop, do_xcom_push=False)

with DAG("mapped_2000", schedule=None, start_date=datetime(2026, 1, 1), max_active_tasks=2000):
    PythonOperator.partial(task_id="m", python_callable=noop, do_xcom_push=False).expand(
        op_args=[[i] for i in range(2000)]
    )

with DAG("chain_{chain_length}", schedule=None, start_date=datetime(2026, 1, 1)):
    chain(*[
        PythonOperator(task_id=f"t{{i}}", python_callable=noop, do_xcom_push=False)
        for i in range({chain_length})
    ])
"""


DAGS = dag_source()
TARGETS = {
    "wide_1000": ">= 300 tasks/s",
    "mapped_2000": ">= 1,500/s (SQLite), >= 800/s (PostgreSQL)",
    "chain_200": ">= 300 tasks/s; hop median <= 2 ms",
}


def _parse(value: str) -> datetime:
    return datetime.fromisoformat(value)


def run_once(base: Path, server_url: str | None, dag_id: str) -> dict[str, float]:
    from tailrace.db import create_engine
    from tailrace.testing._harness import DagHarness

    with database(base, server_url) as url:
        engine = create_engine(url)
        folder = base / "dags"
        folder.mkdir(exist_ok=True)
        (folder / "bench.py").write_text(DAGS)
        with DagHarness(engine, folder, log_folder=base / "logs", parallelism=64) as h:
            h.parse()
            h.scheduler.start()  # pre-start the worker pool outside the timed part
            warm = h.trigger("chain_200")
            h.run(warm, timeout=600)
            start = time.perf_counter()
            pk = h.trigger(dag_id)
            summary = h.run(pk, timeout=600)
            elapsed = time.perf_counter() - start
        engine.dispose()
    assert summary["state"] == "success", summary["state"]
    tis = summary["task_instances"]
    result = {"tasks": float(len(tis)), "seconds": elapsed, "tasks_per_s": len(tis) / elapsed}
    if dag_id == "chain_200":
        by_id = {ti["task_id"]: ti for ti in tis}
        hops = [
            (
                _parse(by_id[f"t{i}"]["start_date"]) - _parse(by_id[f"t{i - 1}"]["end_date"])
            ).total_seconds()
            * 1000
            for i in range(1, 200)
        ]
        result["hop_median_ms"] = median(hops)
        result["hop_p95_ms"] = percentile(hops, 0.95)
    return result


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument(
        "--scenario",
        choices=list(TARGETS),
        action="append",
        help="run only this scenario (repeatable; default: all)",
    )
    args = p.parse_args(argv)
    backend = "postgres" if args.database_url else "sqlite"
    rows = []
    scenarios = (
        ("wide_1000", "1,000 independent tasks"),
        ("mapped_2000", "2,000 mapped instances"),
        ("chain_200", "chain of 200"),
    )
    for dag_id, label in scenarios:
        if args.scenario and dag_id not in args.scenario:
            continue
        runs = []
        for _ in range(args.repeat):
            with workspace() as base:
                runs.append(run_once(base, args.database_url, dag_id))
        row = {
            "scenario": f"{label} ({backend})",
            "runs": args.repeat,
            "median tasks/s": median([r["tasks_per_s"] for r in runs]),
            "median seconds": median([r["seconds"] for r in runs]),
        }
        if dag_id == "chain_200":
            row["hop median ms"] = median([r["hop_median_ms"] for r in runs])
            row["hop p95 ms"] = median([r["hop_p95_ms"] for r in runs])
        else:
            row["hop median ms"] = row["hop p95 ms"] = "-"
        row["target"] = TARGETS[dag_id]
        rows.append(row)
    emit("Scheduler throughput and hop latency (end to end, real workers)", rows, args.json)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
