"""The command line's own cost: start-up, trigger-and-wait, and standalone's start.

    python -m benchmarks.bench_cli startup    [--repeat 5]
    python -m benchmarks.bench_cli trigger    [--repeat 5]
    python -m benchmarks.bench_cli standalone [--repeat 3]
    python -m benchmarks.bench_cli idle       [--seconds 20]

PYTHONPATH picks the Tailrace measured (settings go in TAILRACE_* variables, so an older
tree runs it too).

Every figure is a real ``python -m tailrace`` process, timed from spawn to exit (wall)
and by the CPU it used (user + system, this process's children), next to ``python -c
pass`` for the interpreter's own start. ``trigger`` runs ``dags trigger DAG --wait`` of a
one-task DAG against a running ``tailrace standalone`` (the database already reflects
the DAG, so nothing is parsed), then the same after touching the DAG file (the CLI
parses it first). ``standalone`` times a fresh home (migrations, the admin user, the
first parse) and a second start from spawn until the web UI answers, and the CPU its
processes (the parent, the API child, the workers, and the parser it waited for) had used
by then. ``idle`` starts standalone, lets it settle, and measures the CPU its processes use
over ``--seconds`` while nothing runs, as a share of one core. Medians; add --json for
JSON. The machine should be idle: wall times include waiting for a CPU.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks._common import median, run_scenarios, workspace

DAG = """
from datetime import datetime
from tailrace import dag, task

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def bench_cli():
    @task
    def hello():
        return 1

    hello()

bench_cli()
"""
STARTUP_TARGET_S = 0.3
TRIGGER_TARGET_S = 0.5
STANDALONE_TARGET_S = 2.0
IDLE_TARGET_PERCENT = 1.0
# After the UI answers: the workers finish importing, the first parse-loop pass happens.
SETTLE_SECONDS = 10.0


def _timed(command: Sequence[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one process run to its end; it must exit 0."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: {done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _row(name: str, samples: list[tuple[float, float]], target: float | None) -> dict[str, Any]:
    wall = median([w for w, _ in samples])
    return {
        "scenario": name,
        "wall_ms": wall * 1000,
        "cpu_ms": median([c for _, c in samples]) * 1000,
        "target_ms": "" if target is None else f"≤ {target * 1000:,.0f}",
        "runs": len(samples),
    }


def _env(home: Path, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILRACE_")}
    env["TAILRACE_HOME"] = str(home)
    env.update({f"TAILRACE_{k.upper()}": v for k, v in settings.items()})
    return env


TAILRACE = (sys.executable, "-m", "tailrace")


def startup(args: argparse.Namespace) -> list[dict[str, Any]]:
    with workspace() as base:
        env = _env(base)
        commands: list[tuple[str, Sequence[str], float | None]] = [
            ("python -c pass", (sys.executable, "-c", "pass"), None),
            ("tailrace --version", (*TAILRACE, "--version"), STARTUP_TARGET_S),
            ("tailrace --help", (*TAILRACE, "--help"), STARTUP_TARGET_S),
            ("tailrace dags --help", (*TAILRACE, "dags", "--help"), STARTUP_TARGET_S),
            ("tailrace config --json", (*TAILRACE, "config", "--json"), None),
        ]
        _timed(commands[1][1], env)  # compiles the bytecode once
        return [
            _row(name, [_timed(command, env) for _ in range(args.repeat)], target)
            for name, command, target in commands
        ]


def trigger(args: argparse.Namespace) -> list[dict[str, Any]]:
    from tailrace.testing import start_component, stop_component
    from tailrace.testing._browser import free_port

    with workspace() as base:
        dags = base / "dags"
        dags.mkdir()
        dag_file = dags / "bench_cli.py"
        dag_file.write_text(DAG)
        env = _env(
            base,
            dags_folder=str(dags),
            worker_processes="2",
            load_examples="false",
            api_port=str(free_port()),
        )
        proc = start_component(env, "standalone")
        try:
            wait = (*TAILRACE, "dags", "trigger", "bench_cli", "--wait")
            _timed(wait, env)  # the workers import the DAG file once
            fresh = [_timed(wait, env) for _ in range(args.repeat)]
            listing = [_timed((*TAILRACE, "dags", "list"), env) for _ in range(args.repeat)]
            changed = []
            for _ in range(args.repeat):
                dag_file.write_text(DAG + "\n")
                changed.append(_timed(wait, env))
        finally:
            stop_component(proc)
    return [
        _row("dags trigger --wait (DAG known)", fresh, TRIGGER_TARGET_S),
        _row("dags list (DAG known)", listing, None),
        _row("dags trigger --wait (file changed: parses)", changed, None),
    ]


def _tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and its live descendants, with the children they waited for."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        # utime, stime, cutime, cstime (fields 14-17 of stat; 12-15 after the name).
        times[int(entry)] = sum(int(x) for x in fields[11:15]) / tick
    tree, grew = {pid}, True
    while grew:
        more = {p for p, parent in parents.items() if parent in tree} - tree
        grew = bool(more)
        tree |= more
    return sum(times.get(p, 0.0) for p in tree)


def _start_standalone(env: dict[str, str], port: int) -> tuple[subprocess.Popen[str], float]:
    """A `tailrace standalone` whose web UI answers 200; and the seconds that took."""
    import httpx

    start = time.perf_counter()
    proc = subprocess.Popen(
        [*TAILRACE, "standalone"],
        env={**env, "TAILRACE_API_PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"standalone exited {proc.returncode} before it was ready")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/", timeout=1.0).status_code == 200:
                return proc, time.perf_counter() - start
        except httpx.TransportError:
            pass
        time.sleep(0.01)


def _until_ui_answers(env: dict[str, str], port: int) -> tuple[float, float]:
    """Seconds from spawning `tailrace standalone` until its web UI answers 200, and the
    CPU seconds its processes had used by then."""
    from tailrace.testing import stop_component

    proc, wall = _start_standalone(env, port)
    try:
        return wall, _tree_cpu(proc.pid)
    finally:
        stop_component(proc)


def standalone(args: argparse.Namespace) -> list[dict[str, Any]]:
    from tailrace.testing._browser import free_port

    first, again = [], []
    for i in range(args.repeat):
        with workspace() as base:
            env = _env(base / f"home{i}", worker_processes="2")
            first.append(_until_ui_answers(env, free_port()))
            again.append(_until_ui_answers(env, free_port()))
    return [
        _row("standalone, new home: UI answers", first, STANDALONE_TARGET_S),
        _row("standalone, second start: UI answers", again, STANDALONE_TARGET_S),
    ]


def idle(args: argparse.Namespace) -> list[dict[str, Any]]:
    from tailrace.testing import stop_component
    from tailrace.testing._browser import free_port

    with workspace() as base:
        env = _env(base / "home", worker_processes="2")
        proc, _ = _start_standalone(env, free_port())
        try:
            time.sleep(SETTLE_SECONDS)
            began, cpu = time.perf_counter(), _tree_cpu(proc.pid)
            time.sleep(args.seconds)
            used = _tree_cpu(proc.pid) - cpu
            span = time.perf_counter() - began
        finally:
            stop_component(proc)
    return [
        {
            "scenario": f"standalone idle, {span:.0f} s (examples loaded)",
            "cpu_ms": used * 1000,
            "percent_of_a_core": f"{100 * used / span:.2f}",
            "target": f"≤ {IDLE_TARGET_PERCENT:g} %",
        }
    ]


def options(p: argparse.ArgumentParser) -> None:
    p.set_defaults(repeat=5)
    p.add_argument("--seconds", type=float, default=20.0, help="idle: how long to measure")


SCENARIOS = {
    "startup": ("tailrace start-up, compared with python -c pass", startup),
    "trigger": ("dags trigger --wait of a one-task DAG (standalone running)", trigger),
    "standalone": ("tailrace standalone: spawn to web UI answering", standalone),
    "idle": ("tailrace standalone's CPU while nothing runs", idle),
}


def main(argv: list[str] | None = None) -> int:
    return run_scenarios(argv, __doc__ or "", SCENARIOS, options)


if __name__ == "__main__":
    raise SystemExit(main())
