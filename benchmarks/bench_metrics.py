"""What Prometheus metrics cost: scheduler and streaming throughput, metrics on vs off.

    python -m benchmarks.bench_metrics [--repeat 3] [--events 200000] [--json]

Each round runs every scenario twice, metrics off then on (the order alternates between
rounds), in this process and the worker processes it starts — the same code path as
``metrics_enabled = true`` in standalone: values written to prometheus_client's
multiprocess files, the transition hook counting task finishes. A scrape of the files
after each "on" run checks they were recorded. Medians; target: on >= 95 % of off.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks._common import database, emit, harness, median, parser, workspace
from benchmarks.bench_scheduler import run_once as scheduler_run
from benchmarks.bench_streaming import FLOOD_DAG

TARGET = ">= 95 % of off"


def stream_run(base: Path, server_url: str | None, events: int) -> float:
    """Events per second from one trigger straight into a stream, trigger to success."""
    with (
        database(base, server_url) as url,
        harness(base, url, FLOOD_DAG.format(events=events)) as h,
    ):
        h.parse()
        h.start()
        began = time.perf_counter()
        pk = h.trigger("flood")
        assert h.run(pk, timeout=3600)["state"] == "success"
        elapsed = time.perf_counter() - began
        h.engine.dispose()
    return events / elapsed


def measured(enabled: bool, run: Callable[[Path], float], probe: str) -> float:
    """Run with metrics on or off; with them on, check ``probe`` was recorded."""
    from tailrace import metrics

    with workspace() as base, tempfile.TemporaryDirectory(prefix="tailrace-metrics-") as where:
        if enabled:
            metrics.activate(where)
        try:
            value = run(base)
            if enabled:
                text = metrics.render(where).decode()
                assert probe in text, f"{probe} was not recorded"
        finally:
            metrics.deactivate()
            os.environ.pop(metrics.DIRECTORY_VARIABLE, None)
    return value


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=200_000, help="events in the stream scenario")
    args = p.parse_args(argv)
    backend = "postgres" if args.database_url else "sqlite"

    def tasks(dag_id: str) -> Callable[[Path], float]:
        return lambda base: scheduler_run(base, args.database_url, dag_id)["tasks_per_s"]

    scenarios: list[tuple[str, str, Callable[[Path], float], str]] = [
        ("1,000 independent tasks", "tasks/s", tasks("wide_1000"), "tailrace_ti_finish_total"),
        ("2,000 mapped instances", "tasks/s", tasks("mapped_2000"), "tailrace_ti_finish_total"),
        (
            f"{args.events:,} events into a stream",
            "events/s",
            lambda base: stream_run(base, args.database_url, args.events),
            "tailrace_stream_events_produced_total",
        ),
    ]
    results: dict[str, dict[bool, list[float]]] = {s[0]: {False: [], True: []} for s in scenarios}
    for round_ in range(args.repeat):
        order = (False, True) if round_ % 2 == 0 else (True, False)
        for name, _, run, probe in scenarios:
            for enabled in order:
                results[name][enabled].append(measured(enabled, run, probe))
    rows: list[dict[str, Any]] = []
    for name, unit, _, _ in scenarios:
        off, on = median(results[name][False]), median(results[name][True])
        rows.append(
            {
                "scenario": f"{name} ({backend})",
                "unit": unit,
                "off": off,
                "on": on,
                "on/off %": 100 * on / off,
                "target": TARGET,
            }
        )
    load = os.getloadavg()
    emit(
        f"Metrics on vs off, medians of {args.repeat} (load {load[0]:.2f} {load[1]:.2f})",
        rows,
        args.json,
    )
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
