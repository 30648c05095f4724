"""A paged API into a database: streaming (``.iterate()``) against classic (per-page
deferral, then ``.expand()``), in the same run against an in-process demo API.

    python -m benchmarks.bench_pipeline [--pages 20] [--page-size 100] [--latency 0.2]

Add --json for JSON, --database-url for a PostgreSQL metadata database (default: SQLite;
the target database is a SQLite file either way), --repeat for more runs (medians).
"""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks._common import database, emit, harness, median, parser, rss_mib, workspace

PIPELINE_DAGS = """
from datetime import datetime

from tailrace import dag
from tailrace.example_dags._orders_pipeline import COLUMNS, CURSOR, FetchPageByPage
from tailrace.providers.http import PaginatedHttpOperator
from tailrace.providers.sql import SQLInsertRowsOperator


def load_page():
    return SQLInsertRowsOperator.partial(
        task_id="load_page", table="orders", key="id", conn_id="bench_db", columns=COLUMNS
    )


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def streaming():
    fetch = PaginatedHttpOperator(
        task_id="fetch", http_conn_id="bench_api", endpoint="/orders/cursor",
        pagination=CURSOR, items_path="data.results",
    )
    load_page().iterate(rows=fetch.output)


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def classic():
    fetch = FetchPageByPage(task_id="fetch", http_conn_id="bench_api", endpoint="/orders/cursor")
    load_page().expand(rows=fetch.output)


streaming()
classic()
"""

# Every row is stamped by the database as it lands: the first row's time needs no poller.
TARGET_TABLE = (
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT NOT NULL, amount NUMERIC, "
    "currency TEXT, created_at TEXT, "
    "loaded_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')))"
)


class PeakRss:
    """Samples this process's RSS every 20 ms (scheduler, triggerer, demo API live here;
    the workers are processes of their own)."""

    def __init__(self) -> None:
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, rss_mib())

    def __enter__(self) -> PeakRss:
        self.peak = rss_mib()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def utc(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def bare_fetch(url: str) -> float:
    """The pages fetched one after the other with nothing else: the floor."""
    import httpx

    began = time.monotonic()
    with httpx.Client(base_url=url) as client:
        cursor = None
        while True:
            body = client.get("/orders/cursor", params={"cursor": cursor} if cursor else {}).json()
            cursor = body["meta"]["next_cursor"]
            if not cursor:
                return time.monotonic() - began


def one_run(h: Any, dag_id: str, target: Path, expected_rows: int) -> dict[str, float]:
    from sqlalchemy import select

    from tailrace.db.models import DagRun

    with sqlite3.connect(target) as conn:
        conn.execute("DELETE FROM orders")
    dispatched = len(h.dispatched)
    with PeakRss() as rss:
        pk = h.trigger(dag_id)
        assert h.run(pk, timeout=600)["state"] == "success"
    with h.engine.connect() as conn:
        start, end = conn.execute(
            select(DagRun.start_date, DagRun.end_date).where(DagRun.id == pk)
        ).one()
    with sqlite3.connect(target) as conn:
        rows, first = conn.execute("SELECT COUNT(*), MIN(loaded_at) FROM orders").fetchone()
    assert rows == expected_rows, f"{dag_id}: {rows} rows, expected {expected_rows}"
    first_row = datetime.fromisoformat(first).replace(tzinfo=UTC)
    return {
        "first_row": (first_row - utc(start)).total_seconds(),
        "end_to_end": (utc(end) - utc(start)).total_seconds(),
        "workers": len(h.dispatched) - dispatched,
        "rss": rss.peak,
    }


def run(args: Any) -> list[dict[str, Any]]:
    from tailrace.demo_api import DemoApiConfig, running_demo_api

    config = DemoApiConfig(page_size=args.page_size, pages=args.pages, latency=args.latency)
    measured: dict[str, list[dict[str, float]]] = {"streaming": [], "classic": []}
    bare: list[float] = []
    with (
        workspace() as base,
        database(base, args.database_url) as url,
        running_demo_api(config) as api,
    ):
        target = base / "target.db"
        with sqlite3.connect(target) as conn:
            conn.execute(TARGET_TABLE)
        # Set before the workers are spawned: they inherit the environment.
        os.environ["TAILRACE_CONN_BENCH_API"] = api
        os.environ["TAILRACE_CONN_BENCH_DB"] = f"sqlite:///{target}"
        with harness(base, url, PIPELINE_DAGS) as h:
            h.parse()
            h.start()
            for _ in range(args.repeat):
                bare.append(bare_fetch(api))
                for dag_id in ("streaming", "classic"):
                    measured[dag_id].append(one_run(h, dag_id, target, config.total))
            h.engine.dispose()
    floor = args.pages * args.latency
    e2e = {k: median([r["end_to_end"] for r in v]) for k, v in measured.items()}
    first = {k: median([r["first_row"] for r in v]) for k, v in measured.items()}
    speedup = e2e["classic"] / e2e["streaming"]
    pipeline = f"{args.pages} pages x {args.page_size} items x {args.latency:g}s"
    rows: list[dict[str, Any]] = [
        {
            "scenario": f"{pipeline}: bare fetch (httpx, one page after another)",
            "first row ms": "-",
            "end to end s": median(bare),
            "worker executions": 0,
            "peak RSS MiB": "-",
            "target": f"the floor: {floor:g} s of API latency",
        }
    ]
    targets = {
        "streaming": (
            f"end to end <= {1.2 * floor:.1f} s: {verdict(e2e['streaming'] <= 1.2 * floor)}; "
            f"first row <= 300 ms: {verdict(first['streaming'] <= 0.3)}; "
            f">= 3x faster than classic: {verdict(speedup >= 3)} ({speedup:.2f}x)"
        ),
        "classic": f"first row {first['classic'] / first['streaming']:.0f}x later than streaming",
    }
    labels = {
        "streaming": "streaming: PaginatedHttpOperator -> .iterate() inserts",
        "classic": "classic: defer per page -> .expand() inserts",
    }
    for dag_id, runs in measured.items():
        rows.append(
            {
                "scenario": labels[dag_id],
                "first row ms": first[dag_id] * 1000,
                "end to end s": e2e[dag_id],
                "worker executions": int(median([r["workers"] for r in runs])),
                "peak RSS MiB": median([r["rss"] for r in runs]),
                "target": targets[dag_id],
            }
        )
    return rows


def verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--pages", type=int, default=20)
    p.add_argument("--page-size", type=int, default=100)
    p.add_argument("--latency", type=float, default=0.2)
    args = p.parse_args(argv)
    emit("Paged API -> database: streaming vs classic", run(args), args.json)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
