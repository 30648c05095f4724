"""Streaming triggers: hops saved versus per-page deferral, and raw event throughput.

    python -m benchmarks.bench_streaming hops [--pages 20] [--page-latency 0.2]
    python -m benchmarks.bench_streaming throughput [--events 1000000]

Add --json for JSON, --database-url for PostgreSQL (default: SQLite).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks._common import database, harness, rss_mib, run_scenarios, workspace

HOPS_DAG = """
import asyncio
from datetime import datetime
from tailrace import BaseOperator, BaseTrigger, StartTriggerArgs, TriggerEvent, dag

PAGES, LATENCY = {pages}, {latency}


class PageTrigger(BaseTrigger):
    # One page (classic: defer per page) or every page from `start` (streaming).
    def __init__(self, start=0, stream=False):
        super().__init__()
        self.start, self.stream = start, stream

    def serialize(self):
        return (f"{{__name__}}.PageTrigger", {{"start": self.start, "stream": self.stream}})

    async def run(self):
        for page in range(self.start, PAGES if self.stream else self.start + 1):
            await asyncio.sleep(LATENCY)
            yield TriggerEvent({{"page": page, "rows": [page] * 10}})


class PerPageDeferral(BaseOperator):
    # Airflow's pattern today: defer, resume on a worker, defer again, once per page.
    def execute(self, context):
        self.defer(trigger=PageTrigger(0), method_name="next_page", kwargs={{"total": 0}})

    def next_page(self, context, event=None, total=0):
        total += sum(event["rows"])
        if event["page"] + 1 < PAGES:
            self.defer(
                trigger=PageTrigger(event["page"] + 1), method_name="next_page",
                kwargs={{"total": total}},
            )
        return total


class StreamingHandler(BaseOperator):
    def execute(self, context):
        self.defer(trigger=PageTrigger(0, stream=True), method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):
        return [sum(e.payload["rows"]) for e in events]


class StraightToStream(BaseOperator):
    start_from_trigger = True
    start_trigger_args = StartTriggerArgs(
        trigger_cls=f"{{__name__}}.PageTrigger", trigger_kwargs={{"stream": True}}
    )

    def execute(self, context):
        raise RuntimeError("never runs")


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def per_page():
    PerPageDeferral(task_id="t")

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def streaming():
    # A batch may wait as long as `batch` pages take to arrive: the throughput/delay knob.
    StreamingHandler(task_id="t", max_batch_size={batch}, max_batch_latency={batch_latency})

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def direct():
    StraightToStream(task_id="t")

per_page(); streaming(); direct()
"""

FLOOD_DAG = """
from datetime import datetime
from tailrace import BaseOperator, BaseTrigger, StartTriggerArgs, dag


class Flood(BaseTrigger):
    def __init__(self, n):
        super().__init__()
        self.n = n

    def serialize(self):
        return (f"{{__name__}}.Flood", {{"n": self.n}})

    async def run(self):
        for i in range(self.n):
            yield i


class Sink(BaseOperator):
    start_from_trigger = True
    start_trigger_args = StartTriggerArgs(
        trigger_cls=f"{{__name__}}.Flood", trigger_kwargs={{"n": {events}}}
    )

    def execute(self, context):
        raise RuntimeError("never runs")


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def flood():
    Sink(task_id="sink", max_pending_events=200_000)

flood()
"""


def hops(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    with workspace() as base, database(base, args.database_url) as url:
        source = HOPS_DAG.format(
            pages=args.pages,
            latency=args.page_latency,
            batch=args.batch,
            batch_latency=args.batch * args.page_latency + 0.1,
        )
        with harness(base, url, source) as h:
            h.parse()
            h.start()
            for dag_id, label in (
                ("per_page", "per-page deferral (Airflow's pattern)"),
                ("streaming", f"one streaming run, batches of {args.batch}"),
                ("direct", "one streaming run, straight to the stream"),
            ):
                dispatched, claimed, steps = (
                    len(h.dispatched),
                    h.triggerer.stats.claimed,
                    h.scheduler.steps,
                )
                began = time.monotonic()
                pk = h.trigger(dag_id)
                assert h.run(pk, timeout=600)["state"] == "success"
                rows.append(
                    {
                        "scenario": f"{args.pages} pages x {args.page_latency:g}s: {label}",
                        "worker executions": len(h.dispatched) - dispatched,
                        "triggerer starts": h.triggerer.stats.claimed - claimed,
                        "scheduler passes": h.scheduler.steps - steps,
                        "wall seconds": time.monotonic() - began,
                    }
                )
            h.engine.dispose()
    return rows


def throughput(args: argparse.Namespace) -> list[dict[str, Any]]:
    from sqlalchemy import func, select

    from tailrace.db.models import StreamItem, TriggerEvent

    samples: list[tuple[float, float, int, int]] = []
    with (
        workspace() as base,
        database(base, args.database_url) as url,
        harness(base, url, FLOOD_DAG.format(events=args.events)) as h,
    ):
        h.parse()
        h.start()
        pk = h.trigger("flood")
        stop = threading.Event()
        began = time.monotonic()

        def sample() -> None:
            while not stop.wait(1.0):
                with h.engine.connect() as conn:
                    stored = conn.scalar(select(func.count()).select_from(TriggerEvent))
                    delivered = conn.scalar(select(func.count()).select_from(StreamItem))
                samples.append((time.monotonic() - began, rss_mib(), stored, delivered))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        assert h.run(pk, timeout=3600)["state"] == "success"
        wall = time.monotonic() - began
        stop.set()
        sampler.join()
        h.engine.dispose()
    rss = [s[1] for s in samples] or [float("nan")]
    return [
        {
            "scenario": f"one trigger, {args.events:,} events straight into a stream",
            "wall seconds": wall,
            "events/s persisted and delivered": args.events / wall,
            "RSS MiB first/max/last": f"{rss[0]:.0f} / {max(rss):.0f} / {rss[-1]:.0f}",
            "target": ">= 50,000 ev/s (SQLite), >= 20,000 (PostgreSQL); RSS flat",
        }
    ]


def options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pages", type=int, default=20)
    p.add_argument("--page-latency", type=float, default=0.2)
    p.add_argument("--batch", type=int, default=5)
    p.add_argument("--events", type=int, default=1_000_000)


def main(argv: list[str] | None = None) -> int:
    return run_scenarios(
        argv,
        __doc__.splitlines()[0],
        {
            "hops": ("Hops: per-page deferral vs one streaming run", hops),
            "throughput": ("Streaming throughput (triggerer -> stream)", throughput),
        },
        options,
    )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
