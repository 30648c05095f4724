"""Redis Streams into a PostgreSQL sink keyed by message id, exactly once: a task consumes
the stream in batches (handle_trigger_events); entries are acknowledged (XACK) only after
the task's batch is committed. Killed with -9 mid-stream, the triggerer's pending entries
are taken over by another (XAUTOCLAIM), redeliveries recognised by id and dropped."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text

from tailrace.store import dead_letters
from tailrace.testing import (
    DagHarness,
    wait_for,
)

from ._queue_sink import (
    SCENARIOS,
    QueueUnderTest,
    _counts,
    _unavailable,
    consumer_dag,
    poisoned_dag,
    wait_for_dead_letters,
)

REDIS = "redis://127.0.0.1:6379/0"


def _consumer(sink: Engine, stream: str, holds: tuple[tuple[int, str], ...] = ()) -> str:
    trigger = (
        f"RedisStreamTrigger(stream={stream!r}, group='sink', count=200, block_ms=200, "
        "claim_idle_ms=1000)"
    )
    return consumer_dag(
        "redis_to_sink",
        sink,
        imports="from tailrace.providers.redis import RedisStreamTrigger",
        trigger=trigger,
        number='int(e.payload["fields"]["n"])',
        holds=holds,
    )


@pytest.fixture
def stream() -> Iterator[tuple[Any, str]]:
    """A Redis client and a stream name of this test's own (deleted after it)."""
    import redis

    client = redis.Redis.from_url(REDIS)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        _unavailable(f"Redis at {REDIS} is unreachable: {exc}")
    name = f"tailrace-test-{uuid.uuid4().hex[:10]}"
    try:
        yield client, name
    finally:
        client.delete(name, name + ":dead-letter")
        client.close()


def _publish(client: Any, name: str, first: int, count: int) -> None:
    pipe = client.pipeline(transaction=False)
    for n in range(first, first + count):
        pipe.xadd(name, {"n": str(n)})
    pipe.execute()


def _drained(client: Any, name: str) -> bool:
    """Every entry delivered to the group and acknowledged."""
    group = next(g for g in client.xinfo_groups(name) if g["name"] == b"sink")
    return bool(group["pending"] == 0 and group.get("lag", 0) == 0)


def test_a_stream_reaches_the_sink_once_each_and_is_drained(
    harness: DagHarness,
    write_dag: Any,
    stream: tuple[Any, str],
    sink: Engine,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client, name = stream
    monkeypatch.setenv("TAILRACE_CONN_REDIS_DEFAULT", REDIS)
    write_dag("redis_to_sink.py", _consumer(sink, name))
    # Poison: a field that is not UTF-8 goes to the dead-letter stream, the rest flows on.
    client.xadd(name, {"n": b"\xff\xfe"})
    _publish(client, name, 0, 1500)
    harness.parse()
    harness.trigger("redis_to_sink")
    published = threading.Thread(target=_publish, args=(client, name, 1500, 1500))
    with harness.running():
        published.start()
        published.join()
        wait_for(lambda: (_counts(sink)[0] == 3000 and _drained(client, name)) or None, timeout=90)
    assert _counts(sink) == (3000, 3000, 3000)
    (dead,) = client.xrange(name + ":dead-letter")
    assert b"not UTF-8" in dead[1][b"reason"]


def test_a_batch_that_fails_every_try_is_dead_lettered_acked_and_the_stream_goes_on(
    harness: DagHarness,
    write_dag: Any,
    stream: tuple[Any, str],
    sink: Engine,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client, name = stream
    monkeypatch.setenv("TAILRACE_CONN_REDIS_DEFAULT", REDIS)
    trigger = f"RedisStreamTrigger(stream={name!r}, group='sink', count=50, block_ms=200)"
    source = poisoned_dag(
        "redis_poisoned",
        sink,
        imports="from tailrace.providers.redis import RedisStreamTrigger",
        trigger=trigger,
        number='e.payload["fields"]["n"]',
    )
    write_dag("redis_poisoned.py", source)
    _publish(client, name, 0, 100)
    poison_id = client.xadd(name, {"n": "poison"}).decode()
    _publish(client, name, 100, 100)
    harness.parse()
    harness.trigger("redis_poisoned")
    with harness.running():
        wait_for_dead_letters(harness, sink, 201, lambda: _drained(client, name), timeout=90)
    with harness.engine.connect() as conn:
        letters = dead_letters.list_letters(conn)
    # The poison's batch (at most max_batch_size entries) went to the dead letters with the
    # error, by entry id; every other entry is in the sink once; the group has nothing
    # pending: the dead letters were acknowledged to Redis too.
    assert poison_id in {d.dedup_key for d in letters} and len(letters) <= 10
    assert all("cannot handle a poison entry" in d.reason for d in letters)
    with sink.connect() as conn:
        sunk = set(conn.scalars(text("SELECT id FROM sink")))
    entries = {entry_id.decode() for entry_id, _ in client.xrange(name)}
    assert sunk | {d.dedup_key for d in letters} == entries
    assert not sunk & {d.dedup_key for d in letters}
    # Copied to the stream's dead letters before they were acknowledged, with the reason.
    copied = client.xrange(name + ":dead-letter")
    assert sorted(c[1][b"original_id"].decode() for c in copied) == sorted(
        d.dedup_key for d in letters
    )
    assert all(c[1][b"reason"] == b"ValueError: cannot handle a poison entry" for c in copied)
    assert {c[1][b"n"] for c in copied} >= {b"poison"}


def _under_test(
    stream: tuple[Any, str], sink: Engine, holds: tuple[tuple[int, str], ...]
) -> QueueUnderTest:
    import redis

    client, name = stream

    def in_flight() -> bool:
        # Entries read but not yet acknowledged.
        try:
            return bool(client.xpending(name, "sink")["pending"] > 0)
        except redis.ResponseError:  # the trigger has not created its group yet
            return False

    return QueueUnderTest(
        dag_id="redis_to_sink",
        dag_source=_consumer(sink, name, holds),
        env={"TAILRACE_CONN_REDIS_DEFAULT": REDIS},
        publish=lambda first, count: _publish(client, name, first, count),
        drained=lambda: _drained(client, name),
        in_flight=in_flight,
    )


@pytest.mark.exclusive
@pytest.mark.parametrize("db_backend", ["postgres"])
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_each_entry_reaches_the_sink_once_through_kill_9s_and_a_pause(
    scenario: str,
    database_url: str,
    dags_folder: Path,
    engine: Engine,
    stream: tuple[Any, str],
    sink: Engine,
) -> None:
    run, holds = SCENARIOS[scenario]
    run(
        _under_test(stream, sink, holds),
        database_url=database_url,
        dags_folder=dags_folder,
        engine=engine,
        sink=sink,
    )


WATCHED = """
from tailrace import Asset, AssetWatcher, dag, task
from tailrace.providers.redis import RedisStreamTrigger

orders = Asset(
    "redis://orders",
    watchers=[AssetWatcher("orders", RedisStreamTrigger(stream={stream!r}, group="sink",
                                                         block_ms=200, claim_idle_ms=1000))],
)


@dag(schedule=orders)
def on_orders():
    @task
    def count(*, triggering_asset_events):
        return sum(len(events) for events in triggering_asset_events.values())

    count()


on_orders()
"""


def test_a_watcher_on_a_stream_makes_an_asset_event_of_each_entry_then_acks_it(
    harness: DagHarness,
    write_dag: Any,
    stream: tuple[Any, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tailrace.assets import list_events

    client, name = stream
    monkeypatch.setenv("TAILRACE_CONN_REDIS_DEFAULT", REDIS)
    write_dag("watched.py", WATCHED.format(stream=name))
    _publish(client, name, 0, 50)
    harness.parse()

    def events() -> list[dict[str, Any]]:
        with harness.engine.connect() as conn:
            return list_events(conn, asset="redis://orders")

    def run_total() -> int:
        with harness.engine.connect() as conn:
            from sqlalchemy import select

            from tailrace.db.models import DagRun, XCom

            return sum(
                int(v)
                for v in conn.scalars(
                    select(XCom.value)
                    .join(DagRun, DagRun.id == XCom.dag_run_id)
                    .where(DagRun.dag_id == "on_orders")
                )
            )

    with harness.running():
        wait_for(lambda: (len(events()) == 50 and _drained(client, name)) or None, timeout=60)
        wait_for(lambda: run_total() == 50 or None, timeout=60)
    assert sorted(int(e["extra"]["fields"]["n"]) for e in events()) == list(range(50))
