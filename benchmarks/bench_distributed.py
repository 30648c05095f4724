"""Distributed deployment: throughput with one or two schedulers and workers, and what
the Celery path adds to latency, against the local executor in the same invocation.

    python -m benchmarks.bench_distributed throughput [--repeat 3] [--only celery] [--json]
    python -m benchmarks.bench_distributed latency [--repeat 3] [--json]

Every component runs as its own process (`tailrace scheduler`, `api-server`, `worker`)
on PostgreSQL (--database-url, default the local server) and Redis (--broker-url).

- throughput: 1,000 independent no-op tasks in one run, trigger to run success, for the
  local executor (one scheduler with 2 worker processes; then two schedulers) and the
  Celery executor (one scheduler and one worker of 2 processes; two workers; two
  schedulers and two workers); with the CPU each kind of process spent per task meanwhile
  (a component with its children; PostgreSQL's server processes; median of the runs).
- latency: a chain of 50 no-op tasks; the hop from an upstream task's end to its
  downstream task's start (median, p95), local executor versus Celery.
Numbers are from one machine with 2 cores: every process shares them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks._common import Rows, free_port, median, percentile, run_scenarios, workspace
from benchmarks.bench_scheduler import dag_source

# Warms the components up before a measured run: 64 independent tasks, until every
# worker process has run one (a sequential chain reaches one of a worker's two).
WARM_UP = """
with DAG("warm_up", schedule=None, start_date=datetime(2026, 1, 1), max_active_tasks=64):
    for i in range(64):
        PythonOperator(task_id=f"w{i}", python_callable=noop, do_xcom_push=False)
"""
DAGS = dag_source(chain_length=50) + WARM_UP
SECRET = "benchmark-secret-key-of-enough-length-1234"
# (label, executor, schedulers, workers)
THROUGHPUT = [
    ("local executor, 1 scheduler", "local", 1, 0),
    ("local executor, 2 schedulers", "local", 2, 0),
    ("celery, 1 scheduler, 1 worker", "celery", 1, 1),
    ("celery, 1 scheduler, 2 workers", "celery", 1, 2),
    ("celery, 2 schedulers, 2 workers", "celery", 2, 2),
]
LATENCY = [("local executor", "local", 1, 0), ("celery", "celery", 1, 1)]
# Worker processes of each scheduler (local executor) and each Celery worker.
PROCESSES = 2


@contextmanager
def deployment(
    base: Path, args: argparse.Namespace, executor: str, schedulers: int, workers: int
) -> Iterator[Any]:
    """Components as processes on a throwaway database; yields the engine."""
    import redis

    from tailrace.db import create_engine
    from tailrace.testing import (
        component_env,
        start_component,
        stop_components,
        temporary_postgres_database,
    )

    folder = base / "dags"
    folder.mkdir(exist_ok=True)
    (folder / "bench.py").write_text(DAGS)
    redis.Redis.from_url(args.broker_url).flushdb()
    with ExitStack() as stack:
        url = stack.enter_context(temporary_postgres_database(args.database_url, migrate=True))
        port = free_port()
        env = component_env(
            url,
            folder,
            executor=executor,
            celery_broker_url=args.broker_url,
            secret_key=SECRET,
            api_port=port,
            execution_api_url=f"http://127.0.0.1:{port}",
            worker_processes=PROCESSES,
            parallelism=64,
            # The safety net only: wake-ups drive everything measured here.
            scheduler_poll_interval=5,
        )
        env["TAILRACE_HOME"] = str(base / "home")
        procs = []
        if executor == "celery":
            procs.append(start_component(env, "api-server"))
        procs += [start_component(env, "scheduler") for _ in range(schedulers)]
        worker = ("worker", "--concurrency", str(PROCESSES))
        procs += [start_component(env, *worker) for _ in range(workers)]
        engine = create_engine(url)
        try:
            yield engine, env, procs
        finally:
            engine.dispose()
            stop_components(procs)
            redis.Redis.from_url(args.broker_url).flushdb()


def run_dag(engine: Any, env: dict[str, str], dag_id: str) -> dict[str, Any]:
    """Trigger a run, wake the schedulers, wait for it; its summary."""
    from sqlalchemy import select

    from tailrace.dagrun import run_summary, trigger_dag_run
    from tailrace.db.models import DagRun
    from tailrace.notify import Wakeups

    pk, _ = trigger_dag_run(engine, dag_id, {})
    wakeups = Wakeups(env["TAILRACE_HOME"], engine)
    wakeups.send("scheduler")
    wakeups.close()
    while True:
        with engine.connect() as conn:
            state = conn.scalar(select(DagRun.state).where(DagRun.id == pk))
            if state in ("success", "failed"):
                return run_summary(conn, pk)
        time.sleep(0.05)


def warm_up(engine: Any, env: dict[str, str], processes: int, attempts: int = 5) -> None:
    """Run ``warm_up`` until ``processes`` worker processes have each run a task of it, so
    that none imports the task runner and the DAG file during the measured run."""
    from sqlalchemy import func, select

    from tailrace.db.models import TaskInstance

    warm = 0
    for _ in range(attempts):
        run_dag(engine, env, "warm_up")
        with engine.connect() as conn:
            processes_used = (
                select(TaskInstance.hostname, TaskInstance.pid)
                .where(TaskInstance.dag_id == "warm_up")
                .distinct()
                .subquery()
            )
            warm = conn.scalar(select(func.count()).select_from(processes_used)) or 0
        if warm >= processes:
            return
    print(f"warning: {warm} of {processes} worker processes warm", file=sys.stderr)


def _seconds(summary: dict[str, Any]) -> float:
    """Run duration from its first task's start to its last task's end (database times)."""
    tis = summary["task_instances"]
    start = min(_parse(ti["start_date"]) for ti in tis)
    end = max(_parse(ti["end_date"]) for ti in tis)
    return (end - start).total_seconds()


def _parse(value: str) -> datetime:
    return datetime.fromisoformat(value)


def cpu_seconds(procs: list[Any]) -> dict[str, float]:
    """CPU seconds (user and system) spent so far by each kind of component, its children
    included, and by PostgreSQL's server processes on this machine."""
    tick = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    spent: dict[int, float] = {}
    postgres = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm, _, rest = (entry / "stat").read_text().rpartition(")")
        except OSError:
            continue
        fields = rest.split()
        pid, seconds = int(entry.name), (int(fields[11]) + int(fields[12])) / tick
        parent[pid], spent[pid] = int(fields[1]), seconds
        if comm.partition("(")[2].startswith("postgres"):
            postgres += seconds
    by_kind = {"postgres": postgres}
    for proc in procs:
        kind = proc.args[3]  # [python, -m, tailrace, COMMAND, ...]
        by_kind[kind] = by_kind.get(kind, 0.0) + sum(
            seconds for pid, seconds in spent.items() if _descends(pid, proc.pid, parent)
        )
    return by_kind


def _descends(pid: int, ancestor: int, parent: dict[int, int]) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        pid = parent.get(pid, 0)
    return False


def throughput(args: argparse.Namespace) -> Rows:
    rows = []
    for label, executor, schedulers, workers in THROUGHPUT:
        if args.only and executor != args.only:
            continue
        rates: list[float] = []
        cpu: dict[str, list[float]] = {}
        for _ in range(args.repeat):
            with (
                workspace() as base,
                deployment(base, args, executor, schedulers, workers) as (engine, env, procs),
            ):
                warm_up(engine, env, PROCESSES * (workers or schedulers))
                before = cpu_seconds(procs)
                summary = run_dag(engine, env, "wide_1000")
                after = cpu_seconds(procs)
                assert summary["state"] == "success", summary["state"]
                tasks = len(summary["task_instances"])
                rates.append(tasks / _seconds(summary))
                for kind, seconds in after.items():
                    per_task = (seconds - before.get(kind, 0.0)) * 1000 / tasks
                    cpu.setdefault(kind, []).append(per_task)
        row: dict[str, Any] = {
            "scenario": label,
            "runs": args.repeat,
            "median tasks/s": median(rates),
            "min tasks/s": min(rates),
            "max tasks/s": max(rates),
        }
        for kind in ("scheduler", "api-server", "worker", "postgres"):
            row[f"{kind} ms"] = median(cpu[kind]) if kind in cpu else "-"
        rows.append(row)
    return rows


def latency(args: argparse.Namespace) -> Rows:
    rows = []
    for label, executor, schedulers, workers in LATENCY:
        medians, p95s, runs = [], [], []
        for _ in range(args.repeat):
            with (
                workspace() as base,
                deployment(base, args, executor, schedulers, workers) as (engine, env, _),
            ):
                run_dag(engine, env, "chain_50")  # warm up
                summary = run_dag(engine, env, "chain_50")
            by_id = {ti["task_id"]: ti for ti in summary["task_instances"]}
            hops = [
                (
                    _parse(by_id[f"t{i}"]["start_date"]) - _parse(by_id[f"t{i - 1}"]["end_date"])
                ).total_seconds()
                * 1000
                for i in range(1, 50)
            ]
            medians.append(median(hops))
            p95s.append(percentile(hops, 0.95))
            runs.append(_seconds(summary))
        rows.append(
            {
                "scenario": label,
                "runs": args.repeat,
                "hop median ms": median(medians),
                "hop p95 ms": median(p95s),
                "chain of 50 s": median(runs),
            }
        )
    base_hop = rows[0]["hop median ms"]
    for row in rows:
        row["added vs local ms"] = row["hop median ms"] - base_hop
    return rows


def _options(p: argparse.ArgumentParser) -> None:
    p.set_defaults(database_url="postgresql://postgres@127.0.0.1:5432/postgres")
    p.add_argument("--broker-url", default="redis://127.0.0.1:6379/14")
    p.add_argument(
        "--only", choices=["local", "celery"], help="throughput: that executor's scenarios only"
    )


def main(argv: list[str] | None = None) -> int:
    return run_scenarios(
        argv,
        __doc__.splitlines()[0],
        {
            "throughput": (
                "Throughput: 1,000 independent no-op tasks (tasks/s; CPU ms per task by component)",
                throughput,
            ),
            "latency": ("Hop latency: chain of 50 no-op tasks", latency),
        },
        _options,
    )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
