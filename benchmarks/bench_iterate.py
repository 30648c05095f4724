"""``.iterate()``: expansion at scale, time to the first result, memory of lazy reads.

    python -m benchmarks.bench_iterate scale [--items 1000000]
    python -m benchmarks.bench_iterate first-result [--pages 20] [--page-latency 0.2]
    python -m benchmarks.bench_iterate memory [--items 1000000]

Add --json for JSON, --database-url for PostgreSQL (default: SQLite).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
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

PRODUCER = """
import asyncio
from datetime import datetime
from tailrace import BaseOperator, BaseTrigger, StartTriggerArgs, TriggerEvent, dag, task


class Numbers(BaseTrigger):
    # `n` items, `latency` seconds apart (0: as fast as the triggerer persists them).
    def __init__(self, n, latency=0.0):
        super().__init__()
        self.n, self.latency = n, latency

    def serialize(self):
        return (f"{{__name__}}.Numbers", {{"n": self.n, "latency": self.latency}})

    async def run(self):
        for i in range(self.n):
            if self.latency:
                await asyncio.sleep(self.latency)
            yield {{"page": i, "rows": list(range(10))}} if self.latency else i


def producer(task_id, n, latency=0.0, **kwargs):
    class Produce(BaseOperator):
        start_from_trigger = True
        start_trigger_args = StartTriggerArgs(
            trigger_cls=f"{{__name__}}.Numbers", trigger_kwargs={{"n": n, "latency": latency}}
        )

        def execute(self, context):
            raise RuntimeError("starts in the triggerer")

    return Produce(task_id=task_id, **kwargs)
"""

SCALE_DAG = (
    PRODUCER
    + """

@task
def noop(item):
    return None


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def scale():
    noop.iterate(item=producer("produce", {items}, max_pending_events={items} * 2).output)

scale()
"""
)

FIRST_RESULT_DAG = (
    PRODUCER
    + """

@task
def handle(page):
    return len(page["rows"])


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def lazy():
    handle.iterate(page=producer("fetch", {pages}, {latency}).output)


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def eager():
    handle.expand(page=producer("fetch", {pages}, {latency}).output)

lazy()
eager()
"""
)

MEMORY_DAG = (
    PRODUCER
    + """
from pathlib import Path


def rss_mib():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024


@task
def lazily(items):
    start, peak, total = rss_mib(), 0.0, 0
    for i, item in enumerate(items):
        total += item
        if i % 10_000 == 0:
            peak = max(peak, rss_mib())
    return {{"total": total, "growth_mib": max(peak, rss_mib()) - start}}


@task
def materialised(items):
    start = rss_mib()
    values = list(items)
    return {{"total": sum(values), "growth_mib": rss_mib() - start}}


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def memory():
    items = producer("produce", {items}, max_pending_events={items} * 2).output
    lazily(items) >> materialised(items)

memory()
"""
)


def scale(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The scheduler in this process (as `tailrace scheduler` runs it), the triggerer in
    its own: the producer's flood of events then costs the scheduler no interpreter time,
    and the RSS measured is the scheduler's."""
    from tailrace.config import load_settings
    from tailrace.dagrun import trigger_dag_run
    from tailrace.standalone import Services
    from tailrace.testing import start_component, stop_component

    samples: list[tuple[float, float, int]] = []
    with workspace() as base, database(base, args.database_url) as url:
        dags = base / "dags"
        dags.mkdir()
        (dags / "scale.py").write_text(SCALE_DAG.format(items=args.items))
        env = {
            **os.environ,
            "TAILRACE_HOME": str(base / "home"),
            "TAILRACE_DATABASE_URL": url,
            "TAILRACE_DAGS_FOLDER": str(dags),
            "TAILRACE_WORKER_PROCESSES": "2",
        }
        services = Services(load_settings(env), triggerer_enabled=False)
        services.prepare()
        triggerer = start_component(env, "triggerer")
        try:
            services.start()
            sched = services.scheduler
            assert sched is not None
            began = time.monotonic()
            trigger_dag_run(services.engine, "scale", {})
            sched.wake()
            while sched.expanded < args.items and time.monotonic() - began < 1800:
                time.sleep(0.5)
                samples.append((time.monotonic() - began, rss_mib(), sched.expanded))
            wall = time.monotonic() - began
        finally:
            services.stop()
            stop_component(triggerer)
            services.engine.dispose()
    first = next((t for t, _, n in samples if n > 0), 0.0)
    passes = list(sched.pass_seconds)
    rss = [r for _, r, _ in samples] or [float("nan")]
    return [
        {
            "scenario": f"{args.items:,} streamed items -> .iterate() of no-op tasks",
            "instances created": sched.expanded,
            "instances/s (first to last)": sched.expanded / max(wall - first, 1e-9),
            "pass ms p50/p99/max": "{:.0f} / {:.0f} / {:.0f}".format(
                *(x * 1000 for x in (median(passes), percentile(passes, 0.99), max(passes)))
            ),
            "scheduler RSS MiB first/max/last": f"{rss[0]:.0f} / {max(rss):.0f} / {rss[-1]:.0f}",
            "target": ">= 50,000/s; pass p99 <= 100 ms; RSS <= 300 MB, flat",
        }
    ]


def first_result(args: argparse.Namespace) -> list[dict[str, Any]]:
    from sqlalchemy import func, select

    from tailrace.db.models import DagRun, TaskInstance, TriggerEvent

    source = FIRST_RESULT_DAG.format(pages=args.pages, latency=args.page_latency)
    measured: dict[str, list[tuple[float, float, float]]] = {"lazy": [], "eager": []}
    with (
        workspace() as base,
        database(base, args.database_url) as url,
        harness(base, url, source) as h,
    ):
        h.parse()
        h.start()
        for _ in range(args.repeat):
            for dag_id in ("lazy", "eager"):
                pk = h.trigger(dag_id)
                assert h.run(pk, timeout=600)["state"] == "success"
                with h.engine.connect() as conn:
                    run_start = conn.scalar(select(DagRun.start_date).where(DagRun.id == pk))
                    first_page = conn.scalar(
                        select(func.min(TriggerEvent.created_at))
                        .join(TaskInstance, TaskInstance.trigger_id == TriggerEvent.trigger_id)
                        .where(TaskInstance.dag_run_id == pk, TaskInstance.task_id == "fetch")
                    )
                    first_start = conn.scalar(
                        select(func.min(TaskInstance.start_date)).where(
                            TaskInstance.dag_run_id == pk, TaskInstance.task_id == "handle"
                        )
                    )
                    run_end = conn.scalar(select(DagRun.end_date).where(DagRun.id == pk))
                measured[dag_id].append(
                    (
                        (first_start - run_start).total_seconds(),
                        (first_start - first_page).total_seconds(),
                        (run_end - run_start).total_seconds(),
                    )
                )
        h.engine.dispose()
    rows = []
    for dag_id, label in (("lazy", ".iterate()"), ("eager", ".expand()")):
        runs = measured[dag_id]
        rows.append(
            {
                "scenario": f"{args.pages} pages x {args.page_latency:g}s, downstream {label}",
                "run start -> first instance ms": median([r[0] for r in runs]) * 1000,
                "first page -> first instance ms": median([r[1] for r in runs]) * 1000,
                "run seconds": median([r[2] for r in runs]),
                "target": "iterate: <= 50 ms after the first page",
            }
        )
    return rows


def memory(args: argparse.Namespace) -> list[dict[str, Any]]:
    with (
        workspace() as base,
        database(base, args.database_url) as url,
        harness(base, url, MEMORY_DAG.format(items=args.items), processes=1) as h,
    ):
        h.parse()
        pk = h.trigger("memory")
        assert h.run(pk, timeout=3600)["state"] == "success"
        lazy, eager = h.xcom(pk, "lazily"), h.xcom(pk, "materialised")
        h.engine.dispose()
    expected = args.items * (args.items - 1) // 2
    assert lazy["total"] == eager["total"] == expected
    return [
        {
            "scenario": f"a task reading a {args.items:,}-item stream {how}",
            "worker RSS growth MiB": result["growth_mib"],
            "target": "lazy: flat (a page at a time)",
        }
        for how, result in (("lazily (for item in items)", lazy), ("as a list", eager))
    ]


def options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--items", type=int, default=1_000_000)
    p.add_argument("--pages", type=int, default=20)
    p.add_argument("--page-latency", type=float, default=0.2)


def main(argv: list[str] | None = None) -> int:
    return run_scenarios(
        argv,
        __doc__.splitlines()[0],
        {
            "scale": ("Lazy expansion at scale", scale),
            "first-result": ("First result: .iterate() vs eager .expand()", first_result),
            "memory": ("Reading a stream: lazily vs materialised", memory),
        },
        options,
    )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
