"""Soak: an endless stream, short runs all along, retention and `db clean` — does it stay flat?

    python -m benchmarks.bench_soak [soak] [--minutes 30] [--sample-seconds 60]

``soak`` runs one endless streaming trigger (a batch consumer that keeps nothing), plus
``--short-runs-per-hour`` short streaming runs (each a stream expanded by ``.iterate()``),
with streams kept ``--retention`` seconds and `db clean` every ``--clean-every`` seconds.
Each sample: database size, the RSS of every process, the scheduler's pass p99 since the
last sample, the endless stream's lag (events produced, not yet acknowledged), and the
rows of the growing tables. The verdict compares the last third of the samples with the
middle third (the issue: the last 10 minutes within 10 % of minutes 5-15).

`db clean` of a million rows on its own is ``benchmarks.bench_clean``.

Add --json for JSON, --database-url for PostgreSQL (default: SQLite).
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks._common import database, emit, parser, percentile, workspace

SOAK_DAG = """
import asyncio
from datetime import datetime
from tailrace import BaseOperator, BaseTrigger, TriggerEvent, dag, task


class Endless(BaseTrigger):
    def __init__(self, limit=None):
        super().__init__()
        self.limit = limit

    def serialize(self):
        return (f"{__name__}.Endless", {"limit": self.limit})

    async def run(self):
        i = 0
        while self.limit is None or i < self.limit:
            yield TriggerEvent({"i": i, "pad": "x" * 64})
            i += 1
            if i % 200 == 0:
                await asyncio.sleep(0)


class Sink(BaseOperator):
    # Consumes each batch and keeps nothing: only the log's own tables could grow.
    def __init__(self, limit=None, **kwargs):
        super().__init__(**kwargs)
        self.limit = limit

    def execute(self, context):
        self.defer(trigger=Endless(self.limit), method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):
        return None


class Collect(BaseOperator):
    def execute(self, context):
        self.defer(trigger=Endless(50), method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):
        return [e.payload["i"] for e in events]


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def endless():
    Sink(task_id="sink", max_batch_size=500, max_pending_events=2000)


@dag(schedule=None, start_date=datetime(2026, 1, 1), stream_retention=RETENTION)
def short():
    @task
    def total(batch):
        return sum(batch)

    total.iterate(batch=Collect(task_id="collect").output.batched(10))

endless()
short()
"""


def soak_harness(base: Path, url: str, retention: float) -> Any:
    from tailrace.dag_processing import ParseOptions
    from tailrace.db import create_engine
    from tailrace.testing import DagHarness

    folder = base / "dags"
    folder.mkdir(exist_ok=True)
    source = SOAK_DAG.replace("RETENTION", f"__import__('datetime').timedelta(seconds={retention})")
    (folder / "soak.py").write_text(source)
    h = DagHarness(
        create_engine(url),
        folder,
        log_folder=base / "logs",
        parse_options=ParseOptions(paused_at_creation=False),
    )
    h.scheduler.stream_retention = retention
    return h


def _rss_mib(pid: int | str) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def db_bytes(url: str) -> int:
    if url.startswith("sqlite"):
        path = Path(url.removeprefix("sqlite:///"))
        return sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.exists())
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.connect() as conn:
        size = int(conn.execute(text("SELECT pg_database_size(current_database())")).scalar_one())
    engine.dispose()
    return size


def wal_bytes(url: str) -> int:
    if not url.startswith("sqlite"):
        return 0
    wal = Path(url.removeprefix("sqlite:///") + "-wal")
    return wal.stat().st_size if wal.exists() else 0


def _table_rows(engine: Any) -> dict[str, int]:
    """Every table's rows at the end, largest first: what grew, if anything did."""
    from sqlalchemy import func, select

    from tailrace.db import read_only_engine
    from tailrace.db.models import Base

    with read_only_engine(engine).connect() as conn:
        counts = {
            name: int(conn.scalar(select(func.count()).select_from(table)) or 0)
            for name, table in Base.metadata.tables.items()
        }
    return dict(sorted(counts.items(), key=lambda kv: -kv[1])[:12])


def _rows(engine: Any) -> dict[str, int]:
    from sqlalchemy import func, select

    from tailrace.db import read_only_engine
    from tailrace.db.models import DagRun, StreamItem, TaskInstance, TriggerEvent

    out = {}
    with read_only_engine(engine).connect() as conn:
        for name, model in (
            ("trigger_event", TriggerEvent),
            ("stream_item", StreamItem),
            ("task_instance", TaskInstance),
            ("dag_run", DagRun),
        ):
            out[name] = int(conn.scalar(select(func.count()).select_from(model)) or 0)
    return out


def _lag(engine: Any, run_pk: int) -> tuple[int, int]:
    """(produced, produced but not acknowledged) of the endless stream."""
    from sqlalchemy import select

    from tailrace.db import read_only_engine
    from tailrace.db.models import TaskInstance, Trigger

    with read_only_engine(engine).connect() as conn:
        row = conn.execute(
            select(Trigger.next_sequence, Trigger.acked_sequence)
            .join(TaskInstance, TaskInstance.trigger_id == Trigger.id)
            .where(TaskInstance.dag_run_id == run_pk)
        ).first()
    if row is None:
        return 0, 0
    return int(row.next_sequence), int(row.next_sequence - 1 - row.acked_sequence)


class Passes:
    """Scheduler passes since the last look."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        self.seen = scheduler.steps

    def take(self) -> list[float]:
        steps = self.scheduler.steps
        new = min(steps - self.seen, len(self.scheduler.pass_seconds))
        self.seen = steps
        return list(self.scheduler.pass_seconds)[-new:] if new > 0 else []


def soak(args: argparse.Namespace, base: Path, url: str) -> dict[str, Any]:
    from tailrace.cleanup import clean
    from tailrace.dagrun import trigger_dag_run

    h = soak_harness(base, url, args.retention)
    samples: list[dict[str, Any]] = []
    cleans: list[dict[str, Any]] = []
    try:
        h.parse()
        with h.running():
            endless = h.trigger("endless")
            passes = Passes(h.scheduler)
            began = time.monotonic()
            end = began + args.minutes * 60
            next_run = began
            next_clean = began + args.clean_every
            next_sample = began + args.sample_seconds
            short_every = 3600 / args.short_runs_per_hour
            last_produced = 0
            while (now := time.monotonic()) < end:
                if now >= next_run:
                    trigger_dag_run(h.engine, "short", {})
                    h.scheduler.wake()
                    next_run += short_every
                if now >= next_clean:
                    moment = datetime.now(UTC)
                    t0 = time.perf_counter()
                    report = clean(
                        h.engine,
                        moment - timedelta(seconds=args.retention),
                        now=moment,
                        log_folder=base / "logs",
                    )
                    cleans.append(
                        {
                            "at_min": round((now - began) / 60, 1),
                            "seconds": round(time.perf_counter() - t0, 2),
                            "rows": sum(r.rows for r in report.results),
                        }
                    )
                    next_clean += args.clean_every
                if now >= next_sample:
                    produced, lag = _lag(h.engine, endless)
                    window = passes.take()
                    samples.append(
                        {
                            "minute": round((now - began) / 60, 1),
                            "db_mib": db_bytes(url) / 2**20,
                            "wal_mib": wal_bytes(url) / 2**20,
                            "rss_main_mib": _rss_mib("self"),
                            "rss_workers_mib": [
                                round(_rss_mib(p), 1) for p in h.executor.worker_pids if p
                            ],
                            "pass_p99_ms": percentile(window, 0.99) * 1000,
                            "passes": len(window),
                            "events": produced,
                            "events_per_s": (produced - last_produced) / args.sample_seconds,
                            "lag": lag,
                            **_rows(h.engine),
                        }
                    )
                    last_produced = produced
                    next_sample += args.sample_seconds
                time.sleep(min(0.2, max(0.0, min(next_run, next_clean, next_sample) - now)))
        tables = _table_rows(h.engine)
    finally:
        h.close()
    return {"samples": samples, "cleans": cleans, "verdict": _verdict(samples), "tables": tables}


def _verdict(samples: list[dict[str, Any]]) -> dict[str, float | None]:
    """Mean of the last third over the mean of the middle third, per figure."""
    n = len(samples)
    if n < 3:
        return {}
    middle, last = samples[n // 3 : 2 * n // 3], samples[2 * n // 3 :]
    out: dict[str, float | None] = {}
    for key in ("db_mib", "rss_main_mib", "pass_p99_ms", "trigger_event", "stream_item"):
        a = sum(s[key] for s in middle) / len(middle)
        b = sum(s[key] for s in last) / len(last)
        out[key] = round(b / a, 3) if a else None
    workers_a = [sum(s["rss_workers_mib"]) for s in middle]
    workers_b = [sum(s["rss_workers_mib"]) for s in last]
    a, b = sum(workers_a) / len(workers_a), sum(workers_b) / len(workers_b)
    out["rss_workers_mib"] = round(b / a, 3) if a else None
    return out


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.split("\n", 1)[0] if __doc__ else "soak")
    p.add_argument("scenario", nargs="?", choices=["soak"], default="soak")
    p.add_argument("--minutes", type=float, default=30.0, help="soak duration (default 30)")
    p.add_argument("--sample-seconds", type=float, default=60.0, help="between samples")
    p.add_argument("--short-runs-per-hour", type=float, default=1000.0)
    p.add_argument("--retention", type=float, default=60.0, help="short runs' stream_retention")
    p.add_argument("--clean-every", type=float, default=600.0, help="seconds between db cleans")
    args = p.parse_args(argv)
    with workspace() as base, database(base, args.database_url) as url:
        load_before = load_average()
        result = soak(args, base, url)
    title = f"Soak, {args.minutes:g} min (load {load_before} → {load_average()})"
    if args.json:
        import json

        print(json.dumps({"benchmark": title, "results": result}, indent=2, default=str))
        return 0
    rows = [
        {
            "min": s["minute"],
            "db MiB": s["db_mib"],
            "wal MiB": s["wal_mib"],
            "rss MiB": s["rss_main_mib"],
            "wrk MiB": sum(s["rss_workers_mib"]),
            "p99 ms": s["pass_p99_ms"],
            "ev/s": s["events_per_s"],
            "lag": s["lag"],
            "events": s["trigger_event"],
            "items": s["stream_item"],
            "runs": s["dag_run"],
        }
        for s in result["samples"]
    ]
    emit(title, rows, False)
    print("last third / middle third:", result["verdict"])
    print("db cleans:", result["cleans"])
    print("largest tables at the end (rows):", result["tables"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
