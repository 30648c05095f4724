"""Asset-triggered runs from a Redis watcher: Tailrace's beside Airflow 3.3's own.

    scripts/install-airflow-bench [/work/.airflow-venv]
    python -m benchmarks.bench_airflow_watcher redis [--messages 1000] [--rate 200]
        [--airflow-venv /work/.airflow-venv] [--database-url postgresql://...]

One consuming DAG (a no-op task) scheduled on one asset watched on this machine's Redis.
Both systems are started and their watcher is listening (a consumer in the stream's group;
a subscriber on the channel) before a second process publishes ``--messages`` at
``--rate`` a second, each carrying its publish time; the clock runs from the first publish
until every message is an asset event and no run waits or runs. Tailrace runs a
DagHarness with ``RedisStreamTrigger`` (Redis Streams, a consumer group) on SQLite, and on
PostgreSQL too with --database-url. Airflow runs ``MessageQueueTrigger(scheme=
"redis+pubsub")`` (its provider's ``AwaitMessageTrigger``: Redis pub/sub is the only Redis
watcher Airflow ships) with its scheduler, triggerer, dag-processor and api-server
processes, LocalExecutor and a throwaway PostgreSQL database (on --database-url's server,
else 127.0.0.1:5432). Tailrace first, then Airflow, --repeat times; medians; the ratio is
Tailrace's runs/s over Airflow's. Add --json for JSON.

Exit 1, naming the side, when a side lost messages (the table is printed first): Airflow's
trigger yields one message and returns, the triggerer subscribes it again on a later pass,
and pub/sub keeps nothing meanwhile -- so at 200/s Airflow stores a few events of 1,000.
A lossy side's window ends at its last stored event or run end (then --settle quiet s).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks._common import (
    at_most_every,
    database,
    emit,
    free_port,
    harness,
    median,
    paced,
    percentile,
    run_scenarios,
    workspace,
)
from benchmarks.bench_queues import watched_all_run

REDIS = "redis://127.0.0.1:6379/0"
POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"
ROOT = Path(__file__).resolve().parent.parent

TAILRACE_DAG = """
from tailrace import Asset, AssetWatcher, dag, task
from tailrace.providers.redis import RedisStreamTrigger

messages = Asset("redis://bench", watchers=[AssetWatcher(
    "bench", RedisStreamTrigger(stream={stream!r}, group="bench", count=1000, block_ms=100))])


@dag(schedule=messages, max_active_runs=100_000)
def on_message():
    @task
    def noop():
        return 1

    noop()


on_message()
"""

AIRFLOW_DAG = """
from airflow.providers.common.messaging.triggers.msg_queue import MessageQueueTrigger
from airflow.sdk import Asset, AssetWatcher, dag, task

trigger = MessageQueueTrigger(scheme="redis+pubsub", channels=[{channel!r}],
                              poll_interval={poll!r})
messages = Asset("redis_bench", watchers=[AssetWatcher(name="bench", trigger=trigger)])


@dag(schedule=[messages], max_active_runs=100_000)
def on_message():
    @task
    def noop():
        return 1

    noop()


on_message()
"""


class BenchError(Exception):
    """A side did not do what the benchmark measures: the figures would be meaningless."""


class Incomplete(BenchError):
    """A side lost messages: its figures are printed, then the benchmark fails."""

    def __init__(self, rows: list[dict[str, Any]], message: str) -> None:
        super().__init__(message)
        self.rows = rows


class Result:
    def __init__(self, runs: int, events: int, seconds: float, latencies: list[float]) -> None:
        self.runs, self.events, self.seconds, self.latencies = runs, events, seconds, latencies


def paced_publish(mode: str, name: str, rate: float, count: int) -> None:
    """Publish ``count`` messages at ``rate`` a second, each its publish time (run in a
    process of its own: the publisher must not share a consumer's interpreter lock)."""
    import redis

    client = redis.Redis.from_url(REDIS)
    for _ in paced(count, rate):
        if mode == "stream":
            client.xadd(name, {"t": f"{time.time():.6f}"})
        else:
            client.publish(name, f"{time.time():.6f}")
    client.close()


def _publisher(mode: str, name: str, args: argparse.Namespace) -> subprocess.Popen[bytes]:
    code = (
        "from benchmarks.bench_airflow_watcher import paced_publish; "
        f"paced_publish({mode!r}, {name!r}, {args.rate}, {args.messages})"
    )
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)


def _wait(done: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise BenchError(f"{what} within {timeout:g} s")
        time.sleep(0.05)


# Tailrace


def tailrace_side(args: argparse.Namespace, server_url: str | None) -> Result:
    import redis

    from tailrace.dag_processing import ParseOptions
    from tailrace.db import read_only_engine

    os.environ["TAILRACE_CONN_REDIS_DEFAULT"] = REDIS
    stream = f"bench-watcher-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(REDIS)
    try:
        with workspace() as base, database(base, server_url) as url:
            source = TAILRACE_DAG.format(stream=stream)
            # Unpaused, as Airflow's side: a paused DAG is not queued asset events.
            options = ParseOptions(paused_at_creation=False)
            with harness(base, url, source, parse_options=options) as h:
                h.parse()
                h.start()
                if not h.scheduler.run_until(lambda: _consuming(client, stream), timeout=120):
                    raise BenchError("Tailrace: the watcher never made its group on the stream")
                publisher = _publisher("stream", stream, args)
                began = time.monotonic()
                try:
                    reader = read_only_engine(h.engine)
                    done = at_most_every(0.02, lambda: watched_all_run(reader, args.messages))
                    finished = h.scheduler.run_until(done, timeout=args.timeout)
                    seconds = time.monotonic() - began
                finally:
                    publisher.wait(timeout=60)
                result = _tailrace_result(reader, seconds)
                h.engine.dispose()
                if not finished:
                    raise BenchError(
                        f"Tailrace: {result.events} of {args.messages} messages became asset"
                        f" events within {args.timeout:g} s (or runs were still going)"
                    )
                return result
    finally:
        client.delete(stream)
        client.close()


def _consuming(client: Any, stream: str) -> bool:
    import redis

    try:
        groups = client.xinfo_groups(stream)
    except redis.ResponseError:  # no stream yet
        return False
    # The group is made by the watcher's connect, right before its first read. (This Redis
    # lists a consumer only once a read returned entries, so ``consumers`` stays 0.)
    return any(g["name"] == b"bench" for g in groups)


def _tailrace_result(reader: Any, seconds: float) -> Result:
    from sqlalchemy import func, select

    from tailrace.db.models import AssetEvent, DagRun

    with reader.connect() as conn:
        failed = conn.scalar(
            select(func.count()).select_from(DagRun).where(DagRun.state == "failed")
        )
        if failed:
            raise BenchError(f"Tailrace: {failed} runs of on_message failed")
        runs = conn.scalar(
            select(func.count()).select_from(DagRun).where(DagRun.state == "success")
        )
        rows = conn.execute(select(AssetEvent.timestamp, AssetEvent.extra)).all()
    latencies = [ts.timestamp() - float(extra["fields"]["t"]) for ts, extra in rows]
    return Result(runs or 0, len(rows), seconds, latencies)


# Airflow


def airflow_side(args: argparse.Namespace) -> Result:
    import redis
    from sqlalchemy import make_url

    from tailrace.testing import temporary_postgres_database

    airflow = _airflow_command(args)
    channel = f"bench-watcher-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(REDIS)
    server = args.database_url or POSTGRES
    with (
        workspace() as home,
        temporary_postgres_database(server, prefix="airflow_bench") as url,
    ):
        (home / "dags").mkdir()
        (home / "dags" / "bench_dag.py").write_text(
            AIRFLOW_DAG.format(channel=channel, poll=args.poll)
        )
        env = _airflow_env(home, make_url(url).set(drivername="postgresql+psycopg2"))
        with _logs_kept_on_failure(home):
            return _airflow_measure(args, airflow, env, home, url, client, channel)


def _airflow_measure(
    args: argparse.Namespace,
    airflow: Path,
    env: dict[str, str],
    home: Path,
    url: str,
    client: Any,
    channel: str,
) -> Result:
    from tailrace.db import create_engine

    _airflow_call([str(airflow), "db", "migrate"], env, home / "migrate.log")
    engine = create_engine(url)
    with _airflow_processes(airflow, env, home) as alive:
        _wait(
            lambda: alive() and _subscribers(client, channel) > 0,
            args.startup_timeout,
            "Airflow: no watcher subscribed to the channel",
        )
        publisher = _publisher("pubsub", channel, args)
        began = time.monotonic()
        try:
            seconds = _settle(engine, args, publisher, alive) - began
        finally:
            publisher.wait(timeout=60)
        result = _airflow_result(engine, seconds)
        engine.dispose()
        return result


def _settle(
    engine: Any, args: argparse.Namespace, publisher: Any, alive: Callable[[], bool]
) -> float:
    """When the last asset event was stored or run ended, once every message is an event
    and no run waits or runs -- or, pub/sub having dropped messages that will never come,
    once nothing changed for ``--settle`` seconds after the publisher finished."""
    deadline = time.monotonic() + args.timeout
    last, changed = None, time.monotonic()
    while time.monotonic() < deadline:
        alive()
        now = time.monotonic()
        counts = _airflow_counts(engine)
        if counts != last:
            last, changed = counts, now
        stored, active, waiting, _ = counts
        if active == 0 and waiting == 0:
            if stored >= args.messages:
                return now
            if publisher.poll() is not None and now - changed > args.settle:
                return changed
        time.sleep(0.02)
    raise BenchError(
        f"Airflow: runs still going {args.timeout:g} s after the first publish"
        f" ({last[0] if last else 0} of {args.messages} messages stored as asset events)"
    )


def _airflow_command(args: argparse.Namespace) -> Path:
    airflow = Path(args.airflow_venv) / "bin" / "airflow"
    if not airflow.exists():
        raise BenchError(
            f"Airflow is not installed at {args.airflow_venv}: run scripts/install-airflow-bench"
            f" {args.airflow_venv}"
        )
    return airflow


def _airflow_env(home: Path, url: Any) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "TAILRACE"))}
    port = free_port()
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=url.render_as_string(hide_password=False),
        AIRFLOW__CORE__EXECUTOR="LocalExecutor",
        AIRFLOW__CORE__DAGS_FOLDER=str(home / "dags"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False",
        AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://127.0.0.1:{port}/execution/",
        AIRFLOW__API__HOST="127.0.0.1",
        AIRFLOW__API__PORT=str(port),
        # One secret for every process: each would otherwise make its own, and the
        # api-server would refuse the tokens the scheduler gives task processes.
        AIRFLOW__API_AUTH__JWT_SECRET=secrets.token_hex(16),
        AIRFLOW__API__SECRET_KEY=secrets.token_hex(16),
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="True",
        AIRFLOW_CONN_REDIS_DEFAULT=REDIS,
    )
    return env


def _airflow_call(command: list[str], env: dict[str, str], log: Path) -> None:
    with log.open("wb") as out:
        done = subprocess.run(command, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-2000:]
        raise BenchError(f"Airflow: {' '.join(command[1:])} exited {done.returncode}:\n{tail}")


@contextlib.contextmanager
def _logs_kept_on_failure(home: Path) -> Iterator[None]:
    import shutil
    import tempfile

    try:
        yield
    except BenchError as e:
        kept = Path(tempfile.mkdtemp(prefix="airflow-bench-logs-"))
        for log in home.glob("*.log"):
            shutil.copy(log, kept)
        shutil.copytree(home / "logs", kept / "logs", dirs_exist_ok=True)
        raise BenchError(f"{e}\n(Airflow's logs: {kept})") from e


@contextlib.contextmanager
def _airflow_processes(airflow: Path, env: dict[str, str], home: Path) -> Iterator[Any]:
    """Airflow's four processes, each in a process group of its own so that stopping it
    stops what it started (LocalExecutor's workers, the api-server's workers)."""
    started: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name in ("api-server", "dag-processor", "triggerer", "scheduler"):
            with (home / f"{name}.log").open("wb") as log:
                started[name] = subprocess.Popen(
                    [str(airflow), name],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )

        def alive() -> bool:
            for name, process in started.items():
                if process.poll() is not None:
                    tail = (home / f"{name}.log").read_text(errors="replace")[-2000:]
                    raise BenchError(f"Airflow: {name} exited {process.returncode}:\n{tail}")
            return True

        yield alive
    finally:
        for process in started.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in started.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=30)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _subscribers(client: Any, channel: str) -> int:
    return int(dict(client.pubsub_numsub(channel)).get(channel.encode(), 0))


def _airflow_counts(engine: Any) -> tuple[int, int, int, int]:
    """Asset events stored; runs queued or running; events waiting for a run; runs ended."""
    from sqlalchemy import text

    with engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT (SELECT count(*) FROM asset_event),"
                " (SELECT count(*) FROM dag_run WHERE state IN ('queued', 'running')),"
                " (SELECT count(*) FROM asset_dag_run_queue),"
                " (SELECT count(*) FROM dag_run WHERE state IN ('success', 'failed'))"
            )
        ).one()
    return int(row[0]), int(row[1]), int(row[2]), int(row[3])


def _airflow_result(engine: Any, seconds: float) -> Result:
    import json

    from sqlalchemy import text

    with engine.connect() as conn:
        runs = dict(
            conn.execute(
                text(
                    "SELECT state, count(*) FROM dag_run WHERE run_type = 'asset_triggered'"
                    " GROUP BY state"
                )
            ).all()
        )
        if runs.get("failed"):
            raise BenchError(f"Airflow: {runs['failed']} runs of on_message failed")
        rows = conn.execute(text("SELECT timestamp, extra FROM asset_event")).all()
    latencies = []
    for ts, extra in rows:
        payload = (json.loads(extra) if isinstance(extra, str) else extra)["payload"]
        latencies.append(_aware(ts).timestamp() - float(payload["data"]))
    return Result(int(runs.get("success", 0)), len(rows), seconds, latencies)


def _aware(ts: datetime) -> datetime:
    from datetime import UTC

    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


# The scenario


def redis_(args: argparse.Namespace) -> list[dict[str, Any]]:
    _airflow_command(args)  # before Tailrace's side: fail before measuring anything
    sides: dict[str, list[Result]] = {"Tailrace, SQLite": [], "Airflow 3.3.2, PostgreSQL": []}
    if args.database_url:
        sides = {"Tailrace, SQLite": [], "Tailrace, PostgreSQL": [], **sides}
    for _ in range(args.repeat):
        sides["Tailrace, SQLite"].append(tailrace_side(args, None))
        if args.database_url:
            sides["Tailrace, PostgreSQL"].append(tailrace_side(args, args.database_url))
        sides["Airflow 3.3.2, PostgreSQL"].append(airflow_side(args))
    airflow_rate = median([r.runs / r.seconds for r in sides["Airflow 3.3.2, PostgreSQL"]])
    rows, short = [], []
    for name, results in sides.items():
        rate = median([r.runs / r.seconds for r in results])
        stored = median([r.events for r in results])
        rows.append(
            {
                "scenario": f"{name}: {args.messages:,} msgs at {args.rate:g}/s",
                "events stored": stored,
                "runs/s": rate,
                "events per run": median([r.events / max(r.runs, 1) for r in results]),
                "publish->event p50 ms": median([percentile(r.latencies, 0.5) for r in results])
                * 1000,
                "x Airflow": rate / airflow_rate if airflow_rate else float("nan"),
                "load avg (1 min)": os.getloadavg()[0],
            }
        )
        lost = [args.messages - r.events for r in results if r.events < args.messages]
        if lost:
            short.append(f"{name} lost {', '.join(map(str, lost))} of {args.messages} messages")
    if short:
        raise Incomplete(rows, "; ".join(short) + " (never became asset events)")
    return rows


def options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--messages", type=int, default=1000)
    p.add_argument("--rate", type=float, default=200.0, help="messages a second")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds for a side to finish")
    p.add_argument("--startup-timeout", type=float, default=300.0)
    p.add_argument(
        "--settle", type=float, default=15.0, help="Airflow: quiet seconds that end a lossy run"
    )
    p.add_argument("--poll", type=float, default=0.01, help="Airflow trigger's poll_interval")
    p.add_argument("--airflow-venv", default="/work/.airflow-venv")


def main(argv: list[str] | None = None) -> int:
    try:
        return run_scenarios(
            argv,
            __doc__.splitlines()[0],
            {"redis": ("Asset-triggered runs from a Redis watcher: Tailrace, Airflow", redis_)},
            options,
        )
    except Incomplete as e:
        emit(
            "Asset-triggered runs from a Redis watcher: Tailrace, Airflow",
            e.rows,
            "--json" in (argv or sys.argv),
        )
        print(f"bench_airflow_watcher: {e}", file=sys.stderr)
        return 1
    except BenchError as e:
        print(f"bench_airflow_watcher: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
