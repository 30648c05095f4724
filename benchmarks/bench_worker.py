"""A worker's CPU per no-op task, without a scheduler or database in the way.

    python -m benchmarks.bench_worker [--repeat 3] [--tasks 2000] [--processes 2] [--json]
    python -m benchmarks.bench_worker --profile [--tasks 2000]

The local executor's pre-started workers run ``--tasks`` instances of
``bench_scheduler``'s mapped no-op task, handed to the executor all at once as a
scheduler would (the same workloads: log path, run payload, mapped index), after a
warm-up in which each worker imports the DAG file. Reported per task: the worker
processes' CPU (user + system, from /proc), the owner's (this process: the executor's
I/O thread decoding reports), and wall tasks/s. The system part is mostly the
try's log file: its directory and file created (on ext4 here, 50 µs to over a
millisecond, by how many files were deleted on the disk in the last minutes: read the
user part to compare code). CPU per task changes little on a loaded
machine; wall rate does. ``--profile`` runs the worker's per-task path (``run_task``) in
this process under cProfile, with a channel that drops what the worker sends, and prints
the cumulative and own-time tops (CPU time, not wall).
"""

from __future__ import annotations

import contextlib
import cProfile
import io
import logging
import os
import pstats
import queue
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._common import emit, median, parser, workspace
from benchmarks.bench_scheduler import DAGS

WARM_UP = 20


def _cpu_of(pids: list[int]) -> tuple[float, float]:
    """User and system CPU seconds of processes ``pids``, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    user = system = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        user += int(fields[11]) / tick
        system += int(fields[12]) / tick
    return user, system


def _jobs(base: Path, count: int, first_id: int) -> list[Any]:
    from tailrace.clock import utcnow
    from tailrace.execution._logs import log_path_for
    from tailrace.testing import manual_try

    now = utcnow()  # a manual run's dates are set
    return [
        manual_try(
            "mapped_2000",
            "m",
            ti_id=first_id + i,
            map_index=i,
            fileloc=str(base / "dags" / "bench.py"),
            log_path=str(log_path_for(base / "logs", "mapped_2000", f"manual__{now}", "m", i, 1)),
            logical_date=now,
        )
        for i in range(count)
    ]


def _dag_file(base: Path) -> None:
    folder = base / "dags"
    folder.mkdir(exist_ok=True)
    (folder / "bench.py").write_text(DAGS)


def run_once(base: Path, tasks: int, processes: int) -> dict[str, float]:
    from tailrace.execution import TaskFinished
    from tailrace.executors import LocalExecutor

    _dag_file(base)
    finished: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def on_event(event: Any) -> None:
        if isinstance(event, TaskFinished):
            finished.put(event)

    def no_xcoms(request: Any) -> Any:
        raise AssertionError(f"a no-op task asked for {request!r}")

    executor = LocalExecutor(processes)
    executor.start(on_event, no_xcoms)
    try:
        warm = _jobs(base, WARM_UP * processes, 1_000_000)
        executor.queue_workloads(warm)
        outcomes = [finished.get(timeout=120).outcome for _ in warm]
        jobs = _jobs(base, tasks, 1)
        pids = [pid for pid in executor.worker_pids if pid is not None]
        (user, system), owner = _cpu_of(pids), time.process_time()
        wall = time.perf_counter()
        executor.queue_workloads(jobs)
        outcomes += [finished.get(timeout=600).outcome for _ in jobs]
        wall = time.perf_counter() - wall
        owner = time.process_time() - owner
        user_after, system_after = _cpu_of(pids)
        user, system = user_after - user, system_after - system
        assert pids == executor.worker_pids, "a worker was replaced during the run"
    finally:
        executor.stop()
    assert set(outcomes) == {"success"}, outcomes
    return {
        "user_us": 1e6 * user / tasks,
        "system_us": 1e6 * system / tasks,
        "owner_us": 1e6 * owner / tasks,
        "tasks_per_s": tasks / wall,
    }


class _Drop:
    """The worker's channel, dropping its reports (no task here asks anything)."""

    def send_bytes(self, buf: bytes) -> None:
        pass

    def recv_bytes(self) -> bytes:
        raise AssertionError("a no-op task asked its owner for something")


def profile(base: Path, tasks: int) -> None:
    from tailrace.dagfiles import DagFileCache
    from tailrace.execution._worker import run_task

    _dag_file(base)
    cache = DagFileCache()
    channel = _Drop()
    logging.getLogger().setLevel(logging.INFO)  # as worker_main leaves a worker's root
    for job in _jobs(base, WARM_UP, 1_000_000):
        run_task(job, channel, cache, 1 << 20)
    jobs = _jobs(base, tasks, 1)
    profiler = cProfile.Profile(time.process_time)
    cpu = time.process_time()
    profiler.enable()
    for job in jobs:
        run_task(job, channel, cache, 1 << 20)
    profiler.disable()
    cpu = time.process_time() - cpu
    print(f"run_task in-process: {1000 * cpu / tasks:.3f} ms CPU per task under cProfile")
    for order in ("cumulative", "tottime"):
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats(order).print_stats(40)
        print(out.getvalue())


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=2000)
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--profile", action="store_true")
    args = p.parse_args(argv)
    if args.profile:
        with workspace() as base:
            profile(base, args.tasks)
        return 0
    runs = []
    with contextlib.ExitStack() as stack:
        # Every run's files are deleted after the last run: ext4 skips inodes deleted in
        # the last minute or more when it allocates one, so deleting a run's 4,000 files
        # before the next makes the next one's log files dearer.
        for _ in range(args.repeat):
            runs.append(run_once(stack.enter_context(workspace()), args.tasks, args.processes))
    rows = [
        {
            "scenario": f"{args.tasks:,} mapped no-op instances, {args.processes} workers",
            "runs": args.repeat,
            "workers user CPU µs/task": median([r["user_us"] for r in runs]),
            "workers system CPU µs/task": median([r["system_us"] for r in runs]),
            "owner CPU µs/task": median([r["owner_us"] for r in runs]),
            "tasks/s (wall)": median([r["tasks_per_s"] for r in runs]),
        }
    ]
    emit("Worker CPU per task (local executor, no scheduler)", rows, args.json)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
