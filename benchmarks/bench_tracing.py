"""Throughput with OpenTelemetry tracing at 100 % sampling against tracing off, in one run.

    python -m benchmarks.bench_tracing [--repeat 3] [--events 200000] [--json]
        [--database-url URL]

Scenarios (issue 16): the scheduler's 1,000 independent no-op tasks (tasks/s, trigger to
run success, real workers) and a streaming trigger's events straight into a stream
(events/s). Each measurement runs in a fresh process — tracing is set up once per process
— alternating off and on; traced runs export every span (OTEL_TRACES_SAMPLER=always_on)
over OTLP/HTTP to a receiver in this process, which counts them. Target: traced ≥ 85 % of
off. Medians of ``--repeat`` runs each.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._common import database, emit, harness, median, parser, workspace

TARGET = 0.85


def _scheduler(args: argparse.Namespace) -> dict[str, float]:
    from benchmarks.bench_scheduler import run_once

    with workspace() as base:
        result = run_once(base, args.database_url, "wide_1000")
    return {"rate": result["tasks_per_s"], "seconds": result["seconds"]}


def _streaming(args: argparse.Namespace) -> dict[str, float]:
    from benchmarks.bench_streaming import FLOOD_DAG

    with (
        workspace() as base,
        database(base, args.database_url) as url,
        harness(base, url, FLOOD_DAG.format(events=args.events)) as h,
    ):
        h.parse()
        h.start()
        began = time.monotonic()
        pk = h.trigger("flood")
        assert h.run(pk, timeout=3600)["state"] == "success"
        wall = time.monotonic() - began
        h.engine.dispose()
    return {"rate": args.events / wall, "seconds": wall}


CHILDREN = {"scheduler": _scheduler, "streaming": _streaming}


def child(args: argparse.Namespace) -> None:
    """One measurement in this process, printed as JSON (tracing as the environment says)."""
    from tailrace import tracing
    from tailrace.tracing.owner import install_state_spans

    if tracing.configure():
        install_state_spans("scheduler")
    result = CHILDREN[args.child](args)
    tracing.shutdown()  # every span exported before the process ends
    print(json.dumps(result))


def _measure(args: argparse.Namespace, scenario: str, env: dict[str, str]) -> dict[str, float]:
    command = [sys.executable, "-m", "benchmarks.bench_tracing", "--child", scenario]
    command += ["--events", str(args.events)]
    if args.database_url:
        command += ["--database-url", args.database_url]
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, check=True, timeout=3600
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    from tailrace.testing.otlp import OtlpReceiver

    root = str(Path(__file__).resolve().parent.parent)
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")} | {
        "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    }
    rows = []
    with OtlpReceiver(count_only=True) as receiver:
        traced_env = base_env | receiver.env(
            OTEL_TRACES_SAMPLER="always_on",
            # A burst of 1,000 tries makes thousands of spans at once: none may be dropped.
            OTEL_BSP_MAX_QUEUE_SIZE="262144",
            OTEL_BSP_SCHEDULE_DELAY="500",
        )
        for scenario, label, unit in (
            ("scheduler", "1,000 independent tasks", "tasks/s"),
            ("streaming", f"{args.events:,} events into a stream", "events/s"),
        ):
            off: list[float] = []
            on: list[float] = []
            spans: list[int] = []
            for _ in range(args.repeat):
                off.append(_measure(args, scenario, base_env)["rate"])
                before = receiver.received
                on.append(_measure(args, scenario, traced_env)["rate"])
                spans.append(receiver.received - before)
            ratio = median(on) / median(off)
            rows.append(
                {
                    "scenario": f"{label} ({'postgres' if args.database_url else 'sqlite'})",
                    "unit": unit,
                    "off": median(off),
                    "traced": median(on),
                    "traced/off": f"{ratio:.0%}",
                    "spans/run": f"{median(spans):,.0f}",
                    "target": f">= {TARGET:.0%} {'ok' if ratio >= TARGET else 'MISSED'}",
                }
            )
    load = os.getloadavg()
    for row in rows:
        row["load avg"] = f"{load[0]:.1f}"
    return rows


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=200_000)
    p.add_argument("--child", choices=list(CHILDREN), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args)
        return 0
    emit("Tracing at 100 % sampling against off (one run)", run(args), args.json)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
