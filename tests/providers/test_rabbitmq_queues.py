"""RabbitMQ into a PostgreSQL sink keyed by message id, exactly once: a task consumes a
durable queue in batches (handle_trigger_events); messages are acknowledged only after
the task's batch is committed. Killed with -9 mid-stream, the triggerer's unacknowledged
messages are requeued by RabbitMQ and delivered to another, recognised by id and dropped."""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select

from tailrace.db.models import Job, Trigger
from tailrace.testing import (
    DagHarness,
    component_env,
    run_cli,
    start_component,
    stop_component,
    wait_for,
)

from ._queue_sink import _counts, _unavailable, consumer_dag

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


def _consumer(sink: Engine, queue: str) -> str:
    return consumer_dag(
        "rabbitmq_to_sink",
        sink,
        imports="from tailrace.providers.rabbitmq import RabbitMQQueueTrigger",
        trigger=f"RabbitMQQueueTrigger(queue={queue!r}, prefetch=300)",
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


@pytest.mark.exclusive
@pytest.mark.parametrize("db_backend", ["postgres"])
def test_kill_9_of_the_triggerer_mid_stream_loses_and_repeats_nothing(
    database_url: str,
    dags_folder: Path,
    engine: Engine,
    queue: tuple[Any, str],
    sink: Engine,
) -> None:
    conn, name = queue
    (dags_folder / "rabbitmq_to_sink.py").write_text(textwrap.dedent(_consumer(sink, name)))
    env = component_env(
        database_url,
        dags_folder,
        worker_processes=2,
        trigger_lease_seconds=2,
        scheduler_poll_interval=0.5,
    )
    env["TAILRACE_CONN_RABBITMQ_DEFAULT"] = AMQP
    total = 6000
    scheduler = start_component(env, "scheduler")
    triggerers = [start_component(env, "triggerer") for _ in range(2)]
    try:
        assert run_cli(env, "dags", "trigger", "rabbitmq_to_sink").returncode == 0

        def holder() -> int | None:
            with engine.connect() as db:
                return db.scalar(
                    select(Job.pid)
                    .join(Trigger, Trigger.triggerer_job_id == Job.id)
                    .where(Trigger.completed.is_(False))
                )

        victim_pid = wait_for(holder, timeout=60)
        _publish(conn, name, 0, total // 2)
        publisher = threading.Thread(target=_publish, args=(conn, name, total // 2, total // 2))
        publisher.start()
        # Mid-stream: rows in the sink, and messages delivered but not acknowledged.
        wait_for(lambda: _counts(sink)[0] >= total // 10 or None, timeout=60)
        victim = next(p for p in triggerers if p.pid == victim_pid)
        os.kill(victim_pid, signal.SIGKILL)
        victim.wait()
        publisher.join()
        survivor = next(p for p in triggerers if p is not victim)
        wait_for(lambda: holder() == survivor.pid or None, timeout=60)
        done = lambda: (_counts(sink)[0] == total and _messages(name) == 0) or None  # noqa: E731
        wait_for(done, timeout=180)
        rows, distinct, attempts = _counts(sink)
        assert (rows, distinct) == (total, total)
        assert attempts == total  # redeliveries were recognised, none handled twice
    finally:
        for proc in [scheduler, *triggerers]:
            stop_component(proc)
