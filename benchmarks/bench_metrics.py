"""What Prometheus metrics cost: scheduler and streaming throughput, metrics on vs off.

    python -m benchmarks.bench_metrics [--repeat 3] [--events 200000] [--json]

Each round runs every scenario twice, metrics off then on (the order alternates between
rounds), in this process and the worker processes it starts — the same code path as
``metrics_enabled = true`` in standalone: values written to prometheus_client's
multiprocess files, the transition hook counting task finishes. A scrape of the files
after each "on" run checks they were recorded. Medians; target: on >= 95 % of off.

Wall-clock throughput swings with whatever else shares the machine, so each run's CPU
time (this process and its worker processes, start to end) is reported too: "CPU off/on"
is the work per CPU second with metrics on as a share of off — the cost of metrics
itself, which load on the machine does not blur as much.
"""

from __future__ import annotations

import os
import resource
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


def _cpu_seconds() -> float:
    # Worker processes count once they have exited and been joined (the harness's close).
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def measured(enabled: bool, run: Callable[[Path], float], probe: str) -> tuple[float, float]:
    """Run with metrics on or off: (throughput, CPU seconds); with them on, check ``probe``
    was recorded."""
    from tailrace import metrics

    with workspace() as base, tempfile.TemporaryDirectory(prefix="tailrace-metrics-") as where:
        if enabled:
            metrics.activate(where)
        try:
            began = _cpu_seconds()
            value = run(base)
            cpu = _cpu_seconds() - began
            if enabled:
                text = metrics.render(where).decode()
                assert probe in text, f"{probe} was not recorded"
        finally:
            metrics.deactivate()
            os.environ.pop(metrics.DIRECTORY_VARIABLE, None)
    return value, cpu


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
        ("chain of 200 tasks", "tasks/s", tasks("chain_200"), "tailrace_ti_finish_total"),
        (
            f"{args.events:,} events into a stream",
            "events/s",
            lambda base: stream_run(base, args.database_url, args.events),
            "tailrace_stream_events_produced_total",
        ),
    ]
    results: dict[str, dict[bool, list[tuple[float, float]]]] = {
        s[0]: {False: [], True: []} for s in scenarios
    }
    for round_ in range(args.repeat):
        order = (False, True) if round_ % 2 == 0 else (True, False)
        for name, _, run, probe in scenarios:
            for enabled in order:
                results[name][enabled].append(measured(enabled, run, probe))
    rows: list[dict[str, Any]] = []
    for name, unit, _, _ in scenarios:
        off = median([r[0] for r in results[name][False]])
        on = median([r[0] for r in results[name][True]])
        cpu_off = median([r[1] for r in results[name][False]])
        cpu_on = median([r[1] for r in results[name][True]])
        rows.append(
            {
                "scenario": f"{name} ({backend})",
                "unit": unit,
                "off": off,
                "on": on,
                "on/off %": 100 * on / off,
                "CPU s off/on": f"{cpu_off:.1f}/{cpu_on:.1f}",
                "CPU off/on %": 100 * cpu_off / cpu_on,
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
