"""RabbitMQ into a PostgreSQL sink keyed by message id, exactly once: a task consumes a
durable queue in batches (handle_trigger_events); messages are acknowledged only after
the task's batch is committed. Killed with -9 mid-stream, the triggerer's unacknowledged
messages are requeued by RabbitMQ and delivered to another, recognised by id and dropped."""

from __future__ import annotations

import subprocess
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

AMQP = "amqp://guest:guest@127.0.0.1:5672/"


def _messages(queue: str) -> int | None:
    """Ready plus unacknowledged messages of ``queue`` (rabbitmqctl), None if unknown."""
    out = subprocess.run(
        ["rabbitmqctl", "list_queues", "-q", "name", "messages"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == queue:
            return int(parts[1])
    return None


@pytest.fixture
def queue() -> Iterator[tuple[Any, str]]:
    """A kombu connection and a durable queue name of this test's own (deleted after)."""
    from kombu import Connection

    conn = Connection(AMQP, connect_timeout=3)
    try:
        conn.ensure_connection(max_retries=1)
    except Exception as exc:
        _unavailable(f"RabbitMQ at {AMQP} is unreachable: {exc}")
    name = f"tailrace-test-{uuid.uuid4().hex[:10]}"
    try:
        yield conn, name
    finally:
        channel = conn.channel()
        for q in (name, name + ".dead-letter"):
            channel.queue_delete(q)
        conn.close()


def _publish(conn: Any, name: str, first: int, count: int) -> None:
    from kombu import Producer, Queue

    with conn.clone() as own:
        producer = Producer(own.channel())
        target = Queue(name, durable=True)
        for n in range(first, first + count):
            producer.publish(
                str(n),
                routing_key=name,
                message_id=f"m-{n}",
                delivery_mode=2,
                declare=[target] if n == first else [],
                serializer=None,
                content_type="text/plain",
                content_encoding="utf-8",
            )


def _consumer(sink: Engine, queue: str, holds: tuple[tuple[int, str], ...] = ()) -> str:
    return consumer_dag(
        "rabbitmq_to_sink",
        sink,
        imports="from tailrace.providers.rabbitmq import RabbitMQQueueTrigger",
        trigger=f"RabbitMQQueueTrigger(queue={queue!r}, prefetch=300)",
        holds=holds,
    )


def test_a_queue_reaches_the_sink_once_each_and_is_drained(
    harness: DagHarness,
    write_dag: Any,
    queue: tuple[Any, str],
    sink: Engine,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    conn, name = queue
    monkeypatch.setenv("TAILRACE_CONN_RABBITMQ_DEFAULT", AMQP)
    write_dag("rabbitmq_to_sink.py", _consumer(sink, name))
    _publish(conn, name, 0, 1500)
    # Poison: no message_id, so a redelivery could not be recognised: dead-lettered.
    from kombu import Producer

    Producer(conn.channel()).publish("no id", routing_key=name, serializer=None)
    harness.parse()
    harness.trigger("rabbitmq_to_sink")
    with harness.running():
        _publish(conn, name, 1500, 1500)
        wait_for(lambda: (_counts(sink)[0] == 3000 and _messages(name) == 0) or None, timeout=120)
    assert _counts(sink) == (3000, 3000, 3000)
    assert _messages(name + ".dead-letter") == 1


def test_a_batch_that_fails_every_try_is_copied_to_the_dead_letter_queue_and_acked(
    harness: DagHarness,
    write_dag: Any,
    queue: tuple[Any, str],
    sink: Engine,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kombu import Producer

    conn, name = queue
    monkeypatch.setenv("TAILRACE_CONN_RABBITMQ_DEFAULT", AMQP)
    source = poisoned_dag(
        "rabbitmq_poisoned",
        sink,
        imports="from tailrace.providers.rabbitmq import RabbitMQQueueTrigger",
        trigger=f"RabbitMQQueueTrigger(queue={name!r}, prefetch=50)",
        number='e.payload["body"]',
    )
    write_dag("rabbitmq_poisoned.py", source)
    _publish(conn, name, 0, 100)
    Producer(conn.channel()).publish(
        "poison", routing_key=name, message_id="m-poison", serializer=None, delivery_mode=2
    )
    _publish(conn, name, 100, 100)
    harness.parse()
    harness.trigger("rabbitmq_poisoned")
    with harness.running():
        wait_for_dead_letters(harness, sink, 201, lambda: _messages(name) == 0, timeout=120)
    with harness.engine.connect() as c:
        letters = dead_letters.list_letters(c)
    keys = {d.dedup_key for d in letters}
    assert "m-poison" in keys and len(keys) == len(letters) <= 10
    with sink.connect() as c:
        sunk = set(c.scalars(text("SELECT id FROM sink")))
    assert sunk | keys == {f"m-{n}" for n in range(200)} | {"m-poison"}
    assert not sunk & keys
    # Copied to <queue>.dead-letter before they were acknowledged, the reason in a header.
    copies = []
    with conn.clone() as own:
        dead_queue = own.SimpleQueue(name + ".dead-letter")
        while len(copies) < len(letters):
            message = dead_queue.get(timeout=10)
            copies.append(message)
            message.ack()
        dead_queue.close()
    assert {m.properties["message_id"] for m in copies} == keys
    assert {m.headers["x-tailrace-reason"] for m in copies} == {
        "ValueError: cannot handle a poison entry"
    }
    assert "poison" in {m.body.decode() for m in copies}


def _under_test(
    queue: tuple[Any, str], sink: Engine, holds: tuple[tuple[int, str], ...]
) -> QueueUnderTest:
    conn, name = queue
    return QueueUnderTest(
        dag_id="rabbitmq_to_sink",
        dag_source=_consumer(sink, name, holds),
        env={"TAILRACE_CONN_RABBITMQ_DEFAULT": AMQP},
        publish=lambda first, count: _publish(conn, name, first, count),
        # Delivery tags die with their channel: unacknowledged ones would be requeued.
        drained=lambda: _messages(name) == 0,
        # Delivered but unacknowledged messages still count among the queue's messages.
        in_flight=lambda: (_messages(name) or 0) > 0,
    )


@pytest.mark.exclusive
@pytest.mark.parametrize("db_backend", ["postgres"])
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_each_message_reaches_the_sink_once_through_kill_9s_and_a_pause(
    scenario: str,
    database_url: str,
    dags_folder: Path,
    engine: Engine,
    queue: tuple[Any, str],
    sink: Engine,
) -> None:
    run, holds = SCENARIOS[scenario]
    run(
        _under_test(queue, sink, holds),
        database_url=database_url,
        dags_folder=dags_folder,
        engine=engine,
        sink=sink,
    )
