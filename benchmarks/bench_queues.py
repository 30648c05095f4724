"""Message queues: broker -> sink rows per second through handle_trigger_events batches,
and asset-triggered runs per second from a watcher.

    python -m benchmarks.bench_queues redis [--messages 20000]
    python -m benchmarks.bench_queues rabbitmq [--messages 20000]
    python -m benchmarks.bench_queues nats [--messages 20000]
    python -m benchmarks.bench_queues sqs [--messages 1000]
    python -m benchmarks.bench_queues watcher [--events 2000] [--consumers 1]
    python -m benchmarks.bench_queues latency [--broker redis] [--rate 1000] [--seconds 20]

The brokers are this machine's (Redis 6379, RabbitMQ 5672 guest/guest, NATS 4222 with
JetStream); SQS is moto's server, started on a free port (an emulator: its figure is
moto's speed, not SQS's). ``latency`` starts the consuming run first, then a second
process publishes at ``--rate`` messages a second, each carrying its publish time; a
message's latency is from then until the sink's transaction holding its row committed
(the first ``--warmup`` seconds of messages are left out). ``watcher`` counts the runs
of ``--consumers`` DAGs scheduled on the watched asset that succeeded, from the first
asset event stored to the last run's end (once every event is stored and no run waits or
runs); a DAG's run takes all the
events queued for it when it is created (Airflow's rule), so one consumer's runs per
second are bounded by how often the scheduler creates runs. The metadata
database and the sink are SQLite unless --database-url. Medians of --repeat runs.
Add --json for JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

from benchmarks._common import (
    at_most_every,
    database,
    harness,
    median,
    paced,
    run_scenarios,
    workspace,
)

REDIS = "redis://127.0.0.1:6379/0"
AMQP = "amqp://guest:guest@127.0.0.1:5672/"
NATS = "nats://127.0.0.1:4222"

CONSUMER = """
import sqlite3
import time
from datetime import datetime
from tailrace import BaseOperator, dag
from {module} import {trigger}

SINK = {sink!r}
TIMED = {timed!r}


class ToSink(BaseOperator):
    def execute(self, context):
        self.defer(trigger={trigger}({kwargs}), method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):
        batch = events[0].sequence_index
        rows = [(e.payload["id"], e.payload.get("body") or e.payload["fields"]["n"], batch)
                for e in events]
        with sqlite3.connect(SINK, timeout=60) as conn:
            conn.executemany("INSERT OR IGNORE INTO sink (id, n, batch) VALUES (?, ?, ?)", rows)
        if TIMED:  # when the batch's rows were committed
            with sqlite3.connect(SINK, timeout=60) as conn:
                conn.execute("INSERT OR REPLACE INTO committed VALUES (?, ?)", (batch, time.time()))


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def queue_to_sink():
    ToSink(task_id="to_sink", max_batch_size={batch}, max_batch_latency=0.02,
           max_pending_events={pending})


queue_to_sink()
"""

WATCHED = """
import asyncio
from tailrace import Asset, AssetWatcher, dag, task
from tailrace.sdk.triggers import BaseEventTrigger, TriggerEvent


class Ticks(BaseEventTrigger):
    def __init__(self, count, gap):
        super().__init__()
        self.count, self.gap = count, gap

    def serialize(self):
        return (f"{{type(self).__module__}}.Ticks", {{"count": self.count, "gap": self.gap}})

    async def run(self):
        for n in range(self.count):
            await asyncio.sleep(self.gap)
            yield TriggerEvent({{"n": n}}, checkpoint=n)
        await asyncio.Event().wait()


ticks = Asset("bench://ticks", watchers=[AssetWatcher("ticks", Ticks({events}, {gap}))])


def on_tick(dag_id):
    @dag(dag_id=dag_id, schedule=ticks, max_active_runs=100_000)
    def consumer():
        @task
        def noop():
            return 1

        noop()

    return consumer()


for k in range({consumers}):
    on_tick("on_tick" if k == 0 else f"on_tick_{{k}}")
"""


def _sink(base: Path) -> Path:
    import sqlite3

    path = base / "sink.db"
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE IF NOT EXISTS sink (id TEXT PRIMARY KEY, n TEXT, batch INTEGER)")
        conn.execute("CREATE TABLE IF NOT EXISTS committed (batch INTEGER PRIMARY KEY, at REAL)")
        conn.execute("DELETE FROM sink")
    return path


def _sink_rows(path: Path) -> int:
    import sqlite3

    with sqlite3.connect(path, timeout=60) as conn:
        return int(conn.execute("SELECT count(*) FROM sink").fetchone()[0])


def _publish_redis(name: str, count: int) -> None:
    import redis

    client = redis.Redis.from_url(REDIS)
    for start in range(0, count, 5000):
        pipe = client.pipeline(transaction=False)
        for n in range(start, min(start + 5000, count)):
            pipe.xadd(name, {"n": str(n)})
        pipe.execute()
    client.close()


def _publish_rabbitmq(name: str, count: int) -> None:
    from kombu import Connection, Producer, Queue

    with Connection(AMQP) as conn:
        producer = Producer(conn.channel())
        for n in range(count):
            producer.publish(
                str(n),
                routing_key=name,
                message_id=f"m-{n}",
                delivery_mode=2,
                declare=[Queue(name, durable=True)] if n == 0 else [],
                serializer=None,
                content_type="text/plain",
                content_encoding="utf-8",
            )


def _nats(fn: Callable[[Any, Any], Awaitable[None]]) -> None:
    import asyncio

    import nats

    async def go() -> None:
        nc = await nats.connect(NATS)
        try:
            await fn(nc, nc.jetstream())
        finally:
            await nc.close()

    asyncio.run(go())


def _publish_nats(name: str, count: int) -> None:
    async def go(nc: Any, js: Any) -> None:
        await js.add_stream(name=name, subjects=[name + ".in"])
        for n in range(count):
            await nc.publish(name + ".in", str(n).encode())
            if n % 5000 == 4999:
                await nc.flush()
        await nc.flush()

    _nats(go)


def _moto() -> tuple[subprocess.Popen[bytes], str]:
    import socket

    from tailrace.testing import wait_for

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    server = str(Path(sys.executable).parent / "moto_server")
    proc = subprocess.Popen(
        [server, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def up() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    wait_for(up, timeout=60)
    return proc, f"http://127.0.0.1:{port}"


def _sqs(endpoint: str) -> Any:
    import boto3

    return boto3.client(
        "sqs",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
    )


def _publish_sqs(endpoint: str, name: str, count: int) -> str:
    sqs = _sqs(endpoint)
    url: str = sqs.create_queue(QueueName=name)["QueueUrl"]
    for start in range(0, count, 10):
        entries = [
            {"Id": str(n), "MessageBody": str(n)} for n in range(start, min(start + 10, count))
        ]
        sqs.send_message_batch(QueueUrl=url, Entries=entries)
    return url


def _cleanup(broker: str, name: str) -> None:
    if broker == "redis":
        import redis

        client = redis.Redis.from_url(REDIS)
        client.delete(name)
        client.close()
    elif broker == "rabbitmq":
        from kombu import Connection

        with Connection(AMQP) as conn:
            conn.channel().queue_delete(name)
    elif broker == "nats":

        async def go(nc: Any, js: Any) -> None:
            from nats.js.errors import NotFoundError

            for stream in (name, name + "-dead-letter"):
                with contextlib.suppress(NotFoundError):
                    await js.delete_stream(stream)

        _nats(go)


@contextlib.contextmanager
def _broker(broker: str, name: str, messages: int) -> Iterator[tuple[str, str, str]]:
    """Publish ``messages`` to a new queue of ``broker``; the trigger that reads it."""
    try:
        yield from _published(broker, name, messages)
    finally:
        _cleanup(broker, name)


def _published(broker: str, name: str, messages: int) -> Iterator[tuple[str, str, str]]:
    if broker == "redis":
        os.environ["TAILRACE_CONN_REDIS_DEFAULT"] = REDIS
        _publish_redis(name, messages)
        yield (
            "tailrace.providers.redis",
            "RedisStreamTrigger",
            f"stream={name!r}, group='bench', count=1000, block_ms=100",
        )
    elif broker == "rabbitmq":
        os.environ["TAILRACE_CONN_RABBITMQ_DEFAULT"] = AMQP
        _publish_rabbitmq(name, messages)
        yield (
            "tailrace.providers.rabbitmq",
            "RabbitMQQueueTrigger",
            f"queue={name!r}, prefetch=4000",
        )
    elif broker == "nats":
        os.environ["TAILRACE_CONN_NATS_DEFAULT"] = NATS
        _publish_nats(name, messages)
        yield (
            "tailrace.providers.nats",
            "NatsJetStreamTrigger",
            f"stream={name!r}, subject={name + '.in'!r}, durable='bench', batch=1000,"
            " fetch_timeout=0.1",
        )
    else:
        proc, endpoint = _moto()
        try:
            os.environ["TAILRACE_CONN_AWS_DEFAULT"] = (
                f"aws://bench:bench@/?region_name=us-east-1&endpoint_url={quote(endpoint, safe='')}"
            )
            url = _publish_sqs(endpoint, name, messages)
            yield ("tailrace.providers.amazon", "SqsQueueTrigger", f"sqs_queue={url!r}")
        finally:
            proc.terminate()
            proc.wait(timeout=30)


@contextlib.contextmanager
def _consumer(
    args: argparse.Namespace, broker: str, published: int, *, timed: bool
) -> Iterator[tuple[Any, Path, str]]:
    """A started harness over ``queue_to_sink`` reading a new queue of ``broker`` that
    holds ``published`` messages; its sink; the queue's name."""
    name = f"tailrace-bench-{uuid.uuid4().hex[:8]}"
    with (
        workspace() as base,
        database(base, args.database_url) as url,
        _broker(broker, name, published) as spec,
    ):
        sink = _sink(base)
        source = CONSUMER.format(
            module=spec[0],
            trigger=spec[1],
            kwargs=spec[2],
            sink=str(sink),
            batch=args.batch,
            pending=4 * args.batch,
            timed=timed,
        )
        with harness(base, url, source) as h:
            h.parse()
            h.start()
            yield h, sink, name
            h.engine.dispose()


def _to_sink(args: argparse.Namespace, broker: str) -> list[dict[str, Any]]:
    seconds: list[float] = []
    for _ in range(args.repeat):
        with _consumer(args, broker, args.messages, timed=False) as (h, sink, _name):
            began = time.monotonic()
            h.trigger("queue_to_sink")
            done = h.scheduler.run_until(
                lambda sink=sink: _sink_rows(sink) >= args.messages, timeout=1800
            )
            assert done, f"{_sink_rows(sink)} of {args.messages} rows"
            seconds.append(time.monotonic() - began)
    wall = median(seconds)
    return [
        {
            "scenario": f"{args.messages:,} {broker} messages -> sink, batches of {args.batch}",
            "median seconds": wall,
            "msgs/s": args.messages / wall,
            "load avg (1 min)": os.getloadavg()[0],
        }
    ]


def redis_(args: argparse.Namespace) -> list[dict[str, Any]]:
    return _to_sink(args, "redis")


def rabbitmq(args: argparse.Namespace) -> list[dict[str, Any]]:
    return _to_sink(args, "rabbitmq")


def nats_(args: argparse.Namespace) -> list[dict[str, Any]]:
    return _to_sink(args, "nats")


def sqs(args: argparse.Namespace) -> list[dict[str, Any]]:
    return _to_sink(args, "sqs")


def watcher(args: argparse.Namespace) -> list[dict[str, Any]]:
    from tailrace.dag_processing import ParseOptions
    from tailrace.db import read_only_engine

    rates: list[float] = []
    per_run: list[float] = []
    for _ in range(args.repeat):
        with workspace() as base, database(base, args.database_url) as url:
            source = WATCHED.format(events=args.events, gap=args.gap, consumers=args.consumers)
            # The consumer must be unpaused: a paused DAG is not queued asset events.
            with harness(
                base, url, source, parse_options=ParseOptions(paused_at_creation=False)
            ) as h:
                h.parse()
                h.start()
                # Read-only: the predicate never waits for the write lock.
                reader = read_only_engine(h.engine)
                all_run = partial(watched_all_run, reader, args.events)
                assert h.scheduler.run_until(at_most_every(0.02, all_run), timeout=1800)
                events, runs = _watched_counts(reader)
                rates.append(runs / _watched_seconds(reader))
                per_run.append(events * args.consumers / max(runs, 1))
                h.engine.dispose()
    return [
        {
            "scenario": f"a watcher yielding {args.events:,} events, one every {args.gap:g}s,"
            f" {args.consumers} consuming DAG{'s' if args.consumers > 1 else ''}",
            "asset-triggered runs/s": median(rates),
            "events per run": median(per_run),
            "load avg (1 min)": os.getloadavg()[0],
        }
    ]


def _watched_counts(reader: Any) -> tuple[int, int]:
    """Asset events stored, and asset-triggered runs that succeeded."""
    from sqlalchemy import func, select

    from tailrace.db.models import AssetEvent, DagRun

    with reader.connect() as conn:
        events = conn.scalar(select(func.count()).select_from(AssetEvent)) or 0
        runs = conn.scalar(
            select(func.count()).select_from(DagRun).where(DagRun.state == "success")
        )
    return events, runs or 0


def _watched_seconds(reader: Any) -> float:
    """From the first asset event stored to the last run's end (the triggerer's start,
    before the watcher's first event, is not the scheduler's to count)."""
    from sqlalchemy import func, select

    from tailrace.db.models import AssetEvent, DagRun

    with reader.connect() as conn:
        first = conn.scalar(select(func.min(AssetEvent.timestamp)))
        last = conn.scalar(select(func.max(DagRun.end_date)))
    return float((last - first).total_seconds())


def watched_all_run(reader: Any, events: int) -> bool:
    """Every event stored, and none waits for a run or is in one still going (one
    statement: the predicate runs while the scheduler is measured)."""
    from sqlalchemy import func, select

    from tailrace.db.models import AssetDagRunQueue, AssetEvent, DagRun

    def count(table: Any, *where: Any) -> Any:
        return select(func.count()).select_from(table).where(*where).scalar_subquery()

    with reader.connect() as conn:
        stored, active, waiting = conn.execute(
            select(
                count(AssetEvent),
                count(DagRun, DagRun.state.in_(["queued", "running"])),
                count(AssetDagRunQueue),
            )
        ).one()
    return stored >= events and active == 0 and waiting == 0


def _paced_publish(broker: str, name: str, rate: float, count: int) -> None:
    """Publish ``count`` messages at ``rate`` a second, each body its publish time (run in
    a process of its own by ``latency``: the publisher must not share the consumer's
    interpreter lock)."""
    if broker == "redis":
        import redis

        client = redis.Redis.from_url(REDIS)

        def send(n: int) -> None:
            client.xadd(name, {"n": f"{time.time():.6f}"})

    elif broker == "rabbitmq":
        from kombu import Connection, Producer, Queue

        conn = Connection(AMQP)
        producer = Producer(conn.channel())
        queue = Queue(name, durable=True)
        queue(conn.default_channel).declare()

        def send(n: int) -> None:
            producer.publish(
                f"{time.time():.6f}",
                routing_key=name,
                message_id=f"m-{n}",
                delivery_mode=2,
                serializer=None,
                content_type="text/plain",
                content_encoding="utf-8",
            )
    else:
        _paced_nats(name, rate, count)
        return
    for n in paced(count, rate):
        send(n)


def _paced_nats(name: str, rate: float, count: int) -> None:
    import asyncio

    async def go(nc: Any, js: Any) -> None:
        tick = 0.01
        per_tick = max(1, round(rate * tick))
        began = time.monotonic()
        for n in range(count):
            if n % per_tick == 0:
                await nc.flush()
                await asyncio.sleep(max(0.0, began + n / rate - time.monotonic()))
            await nc.publish(name + ".in", f"{time.time():.6f}".encode())
        await nc.flush()

    _nats(go)


def _latencies(path: Path, since: float) -> list[float]:
    """Seconds from each message's publish time to its batch's commit, for the messages
    published from ``since`` on."""
    import sqlite3

    with sqlite3.connect(path, timeout=60) as conn:
        rows = conn.execute(
            "SELECT c.at - CAST(s.n AS REAL) FROM sink s JOIN committed c ON c.batch = s.batch"
            " WHERE CAST(s.n AS REAL) >= ?",
            (since,),
        ).fetchall()
    return [float(r[0]) for r in rows]


def _deferred(engine: Any) -> bool:
    from sqlalchemy import select

    from tailrace.db.models import TaskInstance

    with engine.connect() as conn:
        return bool(conn.scalar(select(TaskInstance.state)) == "deferred")


def latency(args: argparse.Namespace) -> list[dict[str, Any]]:
    from benchmarks._common import percentile

    results = []
    count = int(args.rate * args.seconds)
    for _ in range(args.repeat):
        with _consumer(args, args.broker, 0, timed=True) as (h, sink, name):
            h.trigger("queue_to_sink")
            assert h.scheduler.run_until(lambda: _deferred(h.engine), timeout=120)
            began = time.time()
            publisher = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "from benchmarks.bench_queues import _paced_publish; "
                    f"_paced_publish({args.broker!r}, {name!r}, {args.rate}, {count})",
                ],
                cwd=Path(__file__).resolve().parent.parent,
            )
            try:
                done = h.scheduler.run_until(
                    lambda sink=sink: _sink_rows(sink) >= count, timeout=args.seconds + 600
                )
            finally:
                publisher.wait(timeout=60)
            assert done, f"{_sink_rows(sink)} of {count} rows"
            seconds = time.time() - began
            results.append((_latencies(sink, began + args.warmup), count / seconds))
    p50s = [percentile(lat, 0.5) for lat, _ in results]
    best = sorted(results, key=lambda r: percentile(r[0], 0.5))[len(results) // 2][0]
    return [
        {
            "scenario": f"{args.broker}: {args.rate:g} msgs/s for {args.seconds:g} s -> sink",
            "messages timed": len(best),
            "p50 ms": median(p50s) * 1000,
            "p90 ms": percentile(best, 0.9) * 1000,
            "p99 ms": percentile(best, 0.99) * 1000,
            "max ms": max(best) * 1000,
            "msgs/s consumed": median([r for _, r in results]),
            "load avg (1 min)": os.getloadavg()[0],
        }
    ]


def options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--messages", type=int, default=20_000)
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--events", type=int, default=2000)
    p.add_argument("--gap", type=float, default=0.001)
    p.add_argument("--consumers", type=int, default=1, help="watcher: DAGs scheduled on the asset")
    p.add_argument("--broker", choices=["redis", "rabbitmq", "nats"], default="redis")
    p.add_argument("--rate", type=float, default=1000.0, help="latency: messages a second")
    p.add_argument("--seconds", type=float, default=20.0, help="latency: publishing time")
    p.add_argument("--warmup", type=float, default=2.0, help="latency: seconds left out")


def main(argv: list[str] | None = None) -> int:
    return run_scenarios(
        argv,
        __doc__.splitlines()[0],
        {
            "redis": ("Redis Streams -> sink (handle_trigger_events)", redis_),
            "rabbitmq": ("RabbitMQ -> sink (handle_trigger_events)", rabbitmq),
            "nats": ("NATS JetStream -> sink (handle_trigger_events)", nats_),
            "sqs": ("SQS (moto's server) -> sink (handle_trigger_events)", sqs),
            "watcher": ("Asset-triggered runs from a watcher", watcher),
            "latency": ("Publish -> committed sink row, at a steady rate", latency),
        },
        options,
    )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
