"""The scheduler's work per task, in terms a loaded machine does not change much.

    python -m benchmarks.bench_scheduler_costs [--repeat 3] [--json] [--profile SCENARIO]
        [--scenario SCENARIO ...]

The scenarios of `bench_scheduler` (same DAGs, harness and warm-up), each reporting per
task: the statements the scheduler's process issued (SQLAlchemy's
``before_cursor_execute``), scheduler steps, CPU milliseconds of the scheduler's thread
(the harness drives it on the main thread) and of its whole process, and of the worker
processes (with their user and system parts). Wall time is printed too, but read it
only on a quiet machine. ``--profile`` prints the scheduler thread's cProfile
(cumulative) for one scenario instead.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._common import database, emit, median, parser, workspace
from benchmarks.bench_scheduler import DAGS

SCENARIOS = (
    ("wide_1000", "1,000 independent tasks"),
    ("mapped_2000", "2,000 mapped instances"),
    ("chain_200", "chain of 200"),
)


def _children_cpu() -> tuple[float, float]:
    """User and system CPU seconds of this process's live children (the worker pool),
    from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    user = system = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():
            user += int(fields[11]) / tick
            system += int(fields[12]) / tick
    return user, system


def run_once(base: Path, server_url: str | None, dag_id: str, profile: bool) -> dict[str, Any]:
    from sqlalchemy import event

    from tailrace.db import create_engine
    from tailrace.testing._harness import DagHarness

    statements = 0
    counting = False

    def count(*_: Any) -> None:
        nonlocal statements
        if counting:
            statements += 1

    with database(base, server_url) as url:
        engine = create_engine(url)
        event.listen(engine, "before_cursor_execute", count)
        folder = base / "dags"
        folder.mkdir(exist_ok=True)
        (folder / "bench.py").write_text(DAGS)
        with DagHarness(engine, folder, log_folder=base / "logs", parallelism=64) as h:
            h.parse()
            h.scheduler.start()
            h.run(h.trigger("chain_200"), timeout=600)
            steps = h.scheduler.steps
            profiler = cProfile.Profile() if profile else None
            counting = True
            workers, process, thread = _children_cpu(), time.process_time(), time.thread_time()
            wall = time.perf_counter()
            if profiler is not None:
                profiler.enable()
            summary = h.run(h.trigger(dag_id), timeout=600)
            if profiler is not None:
                profiler.disable()
            wall = time.perf_counter() - wall
            thread, process = time.thread_time() - thread, time.process_time() - process
            user, system = _children_cpu()
            user, system = user - workers[0], system - workers[1]
            counting = False
            steps = h.scheduler.steps - steps
        engine.dispose()
    assert summary["state"] == "success", summary["state"]
    tasks = len(summary["task_instances"])
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(50)
        print(out.getvalue())
    return {
        "statements": statements / tasks,
        "steps": steps / tasks,
        "thread_ms": 1000 * thread / tasks,
        "process_ms": 1000 * process / tasks,
        "workers_ms": 1000 * (user + system) / tasks,
        "workers_user_us": 1e6 * user / tasks,
        "workers_system_us": 1e6 * system / tasks,
        "tasks_per_s": tasks / wall,
    }


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--profile", choices=[s for s, _ in SCENARIOS], default=None)
    p.add_argument(
        "--scenario",
        choices=[s for s, _ in SCENARIOS],
        action="append",
        help="run only this scenario (repeatable; default: all)",
    )
    args = p.parse_args(argv)
    if args.profile:
        with workspace() as base:
            run_once(base, args.database_url, args.profile, profile=True)
        return 0
    backend = "postgres" if args.database_url else "sqlite"
    rows = []
    for dag_id, label in SCENARIOS:
        if args.scenario and dag_id not in args.scenario:
            continue
        runs = []
        for _ in range(args.repeat):
            with workspace() as base:
                runs.append(run_once(base, args.database_url, dag_id, profile=False))
        rows.append(
            {
                "scenario": f"{label} ({backend})",
                "runs": args.repeat,
                "statements/task": median([r["statements"] for r in runs]),
                "steps/task": median([r["steps"] for r in runs]),
                "scheduler thread CPU ms/task": median([r["thread_ms"] for r in runs]),
                "scheduler process CPU ms/task": median([r["process_ms"] for r in runs]),
                "workers CPU ms/task": median([r["workers_ms"] for r in runs]),
                # The system part is mostly creating each try's log file (bench_worker).
                "workers user µs/task": median([r["workers_user_us"] for r in runs]),
                "workers system µs/task": median([r["workers_system_us"] for r in runs]),
                "tasks/s (wall)": median([r["tasks_per_s"] for r in runs]),
            }
        )
    emit("Scheduler work per task (statements, steps, CPU)", rows, args.json)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
