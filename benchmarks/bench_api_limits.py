"""An oversized request body against a running `tailrace api-server`, over real loopback.

    python -m benchmarks.bench_api_limits oversized [--megabytes 300] [--repeat 3]
        [--unlimited]

Starts `tailrace api-server` (SQLite in a throwaway home), then sends an unauthenticated
POST of ``--megabytes`` to a route that reads a body, once declared by Content-Length and
once chunked, writing as fast as the socket takes it. Reported per case: the time until
the whole answer is read, the answer's status, and how much the server's resident memory
grew (sampled every millisecond during the request), and the slowest answer another
client got meanwhile (``GET /execution/v1/health`` every 5 ms). ``--unlimited`` adds the same cases
with api_max_request_bytes raised above the body (the behaviour before the limit: the
body is read whole and then refused with 401). Medians of --repeat runs; --json for JSON.
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks._common import Rows, database, free_port, median, run_scenarios, workspace

CHUNK = 256 * 1024
TARGET = "/api/v1/dags/any_dag/runs"
PROBE = "/execution/v1/health"


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@contextmanager
def _api_server(base: Path, max_request_bytes: int | None) -> Iterator[tuple[int, int]]:
    from tailrace.testing import component_env, start_component, stop_component

    (base / "dags").mkdir(exist_ok=True)
    with database(base, None) as url:
        port = free_port()
        settings: dict[str, str | float] = {"api_port": port}
        if max_request_bytes is not None:
            settings["api_max_request_bytes"] = max_request_bytes
        env = component_env(url, base / "dags", **settings)
        env["TAILRACE_HOME"] = str(base / "home")
        proc = start_component(env, "api-server")
        try:
            yield port, proc.pid
        finally:
            stop_component(proc)


def _send(port: int, size: int, chunked: bool) -> tuple[float, int]:
    """Send the request while reading the answer; (seconds to the full answer, status)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=120)
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}"
    head = f"POST {TARGET} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
    payload = b"x" * CHUNK
    frame = f"{CHUNK:x}\r\n".encode() + payload + b"\r\n" if chunked else payload

    def write() -> None:
        sent = 0
        try:
            while sent < size:
                sock.sendall(frame)
                sent += CHUNK
            if chunked:
                sock.sendall(b"0\r\n\r\n")
        except OSError:  # the server answered and closed the connection
            pass

    started = time.perf_counter()
    sock.sendall(f"{head}{framing}\r\n\r\n".encode())
    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    data = b""
    while True:
        chunk = sock.recv(65536)
        data += chunk
        if not chunk or _answer_complete(data):
            break
    elapsed = time.perf_counter() - started
    sock.close()
    writer.join()
    return elapsed, int(data.split(b" ", 2)[1]) if data else 0


def _answer_complete(data: bytes) -> bool:
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return False


Measured = tuple[float, int, float, float]


def _measure(port: int, pid: int, size: int, chunked: bool) -> Measured:
    """(seconds to the answer, its status, RSS growth MiB, slowest other request in ms)."""
    import httpx

    baseline = _rss_mib(pid)
    peak = [baseline]
    slowest = [0.0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _rss_mib(pid))
            done.wait(0.001)

    client = httpx.Client(base_url=f"http://127.0.0.1:{port}")
    client.get(PROBE)  # connected before the clock starts

    def probe() -> None:
        # Another client's requests meanwhile: is the server still answering them?
        while True:  # at least once, however soon the big request is answered
            started = time.perf_counter()
            client.get(PROBE)
            slowest[0] = max(slowest[0], (time.perf_counter() - started) * 1000)
            if done.wait(0.005):
                break

    helpers = [threading.Thread(target=f, daemon=True) for f in (sample, probe)]
    for helper in helpers:
        helper.start()
    try:
        elapsed, status = _send(port, size, chunked)
    finally:
        done.set()
        for helper in helpers:
            helper.join()
        client.close()
    peak[0] = max(peak[0], _rss_mib(pid))
    return elapsed, status, peak[0] - baseline, slowest[0]


def oversized(args: argparse.Namespace) -> Rows:
    size = args.megabytes * 1024 * 1024
    limits: list[tuple[str, int | None]] = [("4 MiB", None)]
    if args.unlimited:
        limits.append(("above the body", size + 1024 * 1024))
    rows: Rows = []
    for label, limit in limits:
        with workspace() as base, _api_server(base, limit) as (port, pid):
            _send(port, CHUNK, chunked=False)  # warm up (a 401): imports, first connection
            for chunked in (False, True):
                runs = [_measure(port, pid, size, chunked) for _ in range(args.repeat)]
                rows.append(_row(label, chunked, args.megabytes, runs))
    return rows


def _row(label: str, chunked: bool, megabytes: int, runs: list[Measured]) -> dict[str, Any]:
    return {
        "scenario": f"{megabytes} MB {'chunked' if chunked else 'Content-Length'}",
        "limit": label,
        "status": "/".join(sorted({str(r[1]) for r in runs})),
        "answer median ms": median([r[0] * 1000 for r in runs]),
        "RSS growth median MiB": median([r[2] for r in runs]),
        "RSS growth max MiB": max(r[2] for r in runs),
        "others' max ms": max(r[3] for r in runs),
    }


def options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--megabytes", type=int, default=300, help="size of the body sent")
    p.add_argument(
        "--unlimited",
        action="store_true",
        help="also run with the limit above the body (the server reads it all)",
    )


def main(argv: list[str] | None = None) -> int:
    return run_scenarios(
        argv,
        __doc__ or "",
        {"oversized": ("An oversized unauthenticated request body", oversized)},
        options,
    )


if __name__ == "__main__":
    sys.exit(main())
