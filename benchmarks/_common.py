"""Shared plumbing for benchmarks: a throwaway home and database, tables, JSON output."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

Rows = list[dict[str, Any]]
# A benchmark's scenarios: name -> (table title, function of the parsed arguments).
Scenarios = dict[str, tuple[str, Callable[[argparse.Namespace], Rows]]]


def run_scenarios(
    argv: list[str] | None,
    description: str,
    scenarios: Scenarios,
    options: Callable[[argparse.ArgumentParser], None],
) -> int:
    """``python -m benchmarks.<name> SCENARIO [options]``: run one scenario, print its table."""
    p = parser(description)
    p.add_argument("scenario", choices=list(scenarios))
    options(p)
    args = p.parse_args(argv)
    title, run = scenarios[args.scenario]
    emit(title, run(args), args.json)
    return 0


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--repeat", type=int, default=3, help="runs per scenario; medians reported")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument(
        "--database-url",
        default=None,
        help="PostgreSQL server URL to create a throwaway database on (default: SQLite)",
    )
    return p


@contextmanager
def workspace() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="tailrace-bench-") as tmp:
        yield Path(tmp)


@contextmanager
def database(base: Path, server_url: str | None) -> Iterator[str]:
    from tailrace.testing import migrate_database, temporary_postgres_database, temporary_sqlite_url

    if server_url is None:
        url = temporary_sqlite_url(base)
        migrate_database(url)
        yield url
    else:
        with temporary_postgres_database(server_url, migrate=True) as url:
            yield url


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def machine_speed() -> dict[str, float]:
    """How fast this machine is right now, as two yardsticks to read a benchmark's figures
    against: the same two-core machine ran the same tree 2.5 times slower on some days than
    on others (a shared host), and a file costs 0.3-1.6 ms by the disk's mood. The probe
    is docs/benchmarks.md's: ``sum(range(30_000_000))``, 0.31-0.36 s on a normal day; the
    other, a directory with one small file in it (what each mapped try's log costs).
    Medians of three."""

    def probe() -> float:
        began = time.perf_counter()
        sum(range(30_000_000))
        return time.perf_counter() - began

    def files() -> float:
        with tempfile.TemporaryDirectory(prefix="tailrace-bench-") as tmp:
            began = time.perf_counter()
            for i in range(200):
                folder = os.path.join(tmp, f"map_index={i}")
                os.mkdir(folder)
                fd = os.open(os.path.join(folder, "attempt=1.log"), os.O_WRONLY | os.O_CREAT)
                os.write(fd, b"x" * 200)
                os.close(fd)
            return (time.perf_counter() - began) / 200 * 1e6

    return {
        "probe s": median([probe() for _ in range(3)]),
        "directory and file us": median([files() for _ in range(3)]),
    }


def emit(title: str, rows: list[dict[str, Any]], as_json: bool) -> None:
    machine = machine_speed()
    if as_json:
        print(json.dumps({"benchmark": title, "results": rows, "machine": machine}, indent=2))
        return
    table = Table(title=title)
    for column in rows[0]:
        table.add_column(
            column, justify="left" if column in ("scenario", "target", "measure") else "right"
        )
    for row in rows:
        table.add_row(*(f"{v:,.1f}" if isinstance(v, float) else str(v) for v in row.values()))
    # Wide enough for the table even when piped (rich assumes 80 columns then).
    console = Console(width=max(140, shutil.get_terminal_size().columns))
    console.print(table)
    console.print(
        f"Machine now: probe {machine['probe s']:.2f} s (normal 0.31-0.36), "
        f"a directory and a file {machine['directory and file us']:,.0f} µs"
    )


def harness(base: Path, url: str, source: str, **kwargs: Any) -> Any:
    """A DagHarness over a one-file dags folder holding ``source``."""
    from tailrace.db import create_engine
    from tailrace.testing import DagHarness

    folder = base / "dags"
    folder.mkdir(exist_ok=True)
    (folder / "bench_dag.py").write_text(source)
    return DagHarness(create_engine(url), folder, log_folder=base / "logs", **kwargs)


def at_most_every(seconds: float, done: Callable[[], bool]) -> Callable[[], bool]:
    """``done``, asked at most once per ``seconds`` (False in between): a ``run_until``
    predicate that counts rows must not take the scheduler's thread (and the database) from
    what it measures after every step. Times gain at most ``seconds`` of resolution."""

    last = 0.0

    def check() -> bool:
        nonlocal last
        now = time.monotonic()
        if now - last < seconds:
            return False
        last = now
        return done()

    return check


def rss_mib() -> float:
    """This process's resident memory, in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def free_port() -> int:
    """A TCP port on loopback that nothing listens on (for a component to bind)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def paced(count: int, rate: float) -> Iterator[int]:
    """0 .. ``count`` - 1, the n-th at ``n / rate`` seconds from the first (checked every
    10 ms worth of messages: a sleep per message would cap a high rate)."""

    per_tick = max(1, round(rate * 0.01))
    began = time.monotonic()
    for n in range(count):
        if n % per_tick == 0:
            time.sleep(max(0.0, began + n / rate - time.monotonic()))
        yield n
