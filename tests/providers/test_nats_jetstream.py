"""NATS JetStream into a PostgreSQL sink keyed by message id, exactly once: a task
consumes a stream through a durable pull consumer in batches (handle_trigger_events);
messages are acknowledged only after the task's batch is committed. Killed with -9
mid-stream, the triggerer's unacknowledged messages are redelivered by JetStream after
ack_wait, recognised by their stream sequence and dropped."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import socket
import subprocess
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from sqlalchemy import Engine

from tailrace.store import dead_letters
from tailrace.testing import DagHarness, wait_for

from ._queue_sink import (
    QueueUnderTest,
    _counts,
    _unavailable,
    consumer_dag,
    kill_the_triggerer_mid_stream,
    poisoned_dag,
    wait_for_dead_letters,
)

NATS = "nats://127.0.0.1:4222"
T = TypeVar("T")


def _with_js(url: str, fn: Callable[[Any], Awaitable[T]]) -> T:
    """``fn(jetstream)`` on a connection of its own (the tests are synchronous)."""
    import nats

    async def go() -> T:
        nc = await nats.connect(url, allow_reconnect=False, connect_timeout=3)
        try:
            return await fn(nc.jetstream())
        finally:
            await nc.close()

    return asyncio.run(go())


class Stream:
    """A JetStream stream name and subject of this test's own (deleted after it)."""

    def __init__(self, url: str = NATS) -> None:
        self.url = url
        self.name = f"tailrace-test-{uuid.uuid4().hex[:10]}"
        self.subject = f"{self.name}.in"

    def publish(self, first: int, count: int, body: Callable[[int], bytes] | None = None) -> None:
        async def go(js: Any) -> None:
            for n in range(first, first + count):
                await js.publish(self.subject, body(n) if body else str(n).encode())

        _with_js(self.url, go)

    def consumer(self) -> Any:
        async def go(js: Any) -> Any:
            return await js.consumer_info(self.name, "sink")

        return _with_js(self.url, go)

    def in_flight(self) -> bool:
        from nats.js.errors import NotFoundError

        try:
            return bool(self.consumer().num_ack_pending > 0)
        except NotFoundError:  # the trigger has not made its consumer yet
            return False

    def drained(self) -> bool:
        info = self.consumer()
        return bool(info.num_pending == 0 and info.num_ack_pending == 0)

    def dead_letters(self) -> list[Any]:
        async def go(js: Any) -> list[Any]:
            dead = self.name + "-dead-letter"
            count = (await js.stream_info(dead)).state.messages
            return [await js.get_msg(dead, seq) for seq in range(1, count + 1)]

        return _with_js(self.url, go)

    def delete(self) -> None:
        from nats.js.errors import NotFoundError

        async def go(js: Any) -> None:
            for name in (self.name, self.name + "-dead-letter"):
                with contextlib.suppress(NotFoundError):
                    await js.delete_stream(name)

        _with_js(self.url, go)


@pytest.fixture
def stream() -> Iterator[Stream]:
    own = Stream()
    try:
        _with_js(NATS, lambda js: js.account_info())
    except Exception as exc:
        _unavailable(f"NATS JetStream at {NATS} is unreachable: {exc!r}")
    try:
        yield own
    finally:
        own.delete()


def _consumer(stream: Stream, sink: Engine) -> str:
    trigger = (
        f"NatsJetStreamTrigger(stream={stream.name!r}, subject={stream.subject!r}, "
        "durable='sink', batch=200, fetch_timeout=0.2, ack_wait=5)"
    )
    return consumer_dag(
        "nats_to_sink",
        sink,
        imports="from tailrace.providers.nats import NatsJetStreamTrigger",
        trigger=trigger,
    )


def test_a_stream_reaches_the_sink_once_each_and_is_drained(
    harness: DagHarness,
    write_dag: Any,
    stream: Stream,
    sink: Engine,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TAILRACE_CONN_NATS_DEFAULT", NATS)
    write_dag("nats_to_sink.py", _consumer(stream, sink))
    harness.parse()
    harness.trigger("nats_to_sink")
    with harness.running():
        # The trigger creates the stream; publish once it exists.
        wait_for(lambda: _consumer_exists(stream), 60)
        stream.publish(0, 1, body=lambda _: b"\xff\xfe")  # poison: not UTF-8
        stream.publish(0, 3000)
        wait_for(lambda: (_counts(sink)[0] == 3000 and stream.drained()) or None, timeout=120)
    # Stream sequences 2..3001: the poison took sequence 1.
    assert _counts(sink) == (3000, 3000, 3000)
    (dead,) = stream.dead_letters()
    assert "not UTF-8" in dead.headers["Tailrace-Reason"]
    assert dead.headers["Tailrace-Original-Sequence"] == "1"
    assert dead.data == b"\xff\xfe"


def test_a_batch_that_fails_every_try_is_published_to_the_dead_letter_stream_and_acked(
    harness: DagHarness,
    write_dag: Any,
    stream: Stream,
    sink: Engine,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TAILRACE_CONN_NATS_DEFAULT", NATS)
    trigger = (
        f"NatsJetStreamTrigger(stream={stream.name!r}, subject={stream.subject!r}, "
        "durable='sink', batch=50, fetch_timeout=0.2, ack_wait=30)"
    )
    source = poisoned_dag(
        "nats_poisoned",
        sink,
        imports="from tailrace.providers.nats import NatsJetStreamTrigger",
        trigger=trigger,
        number='e.payload["body"]',
    )
    write_dag("nats_poisoned.py", source)
    harness.parse()
    harness.trigger("nats_poisoned")
    with harness.running():
        wait_for(lambda: _consumer_exists(stream), 60)
        stream.publish(0, 100)
        stream.publish(0, 1, body=lambda _: b"poison")  # stream sequence 101
        stream.publish(100, 100)

        wait_for_dead_letters(harness, sink, 201, stream.drained, timeout=120)
    with harness.engine.connect() as c:
        keys = {d.dedup_key for d in dead_letters.list_letters(c)}
    assert "101" in keys and len(keys) <= 10
    assert _counts(sink)[0] == 201 - len(keys)
    # Published to the dead-letter stream before they were acknowledged, with the reason.
    copies = stream.dead_letters()
    assert {m.headers["Tailrace-Original-Sequence"] for m in copies} == keys
    assert {m.headers["Tailrace-Reason"] for m in copies} == {
        "ValueError: cannot handle a poison entry"
    }
    assert b"poison" in {m.data for m in copies}


def _trigger(stream: Stream) -> Any:
    from tailrace.providers.nats import NatsJetStreamTrigger

    return NatsJetStreamTrigger(
        stream=stream.name, subject=stream.subject, durable="sink", fetch_timeout=0.2
    )


def test_a_fetch_whose_deadline_runs_out_is_an_empty_pull_not_a_lost_server(
    stream: Stream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nats-py raises asyncio's TimeoutError (the builtin: an OSError) when a fetch's
    deadline runs out between its two pull requests, as it does on a busy machine. Taken
    for the server's loss, it reconnected, and what was fetched waited out ack_wait."""
    monkeypatch.setenv("TAILRACE_CONN_NATS_DEFAULT", NATS)
    trigger = _trigger(stream)

    async def scenario() -> list[Any]:
        await trigger._connect()
        try:

            async def out_of_time(*args: Any, **kwargs: Any) -> list[Any]:
                raise TimeoutError  # what nats-py's _fetch_n raises

            monkeypatch.setattr(trigger._sub, "fetch", out_of_time)
            return list(await trigger._pull())
        finally:
            await trigger._disconnect()

    assert asyncio.run(scenario()) == []


def test_acknowledgements_asked_for_while_reconnecting_go_once_connected(
    stream: Stream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reply subject answers on any connection: what the triggerer acknowledges while
    the trigger reconnects is sent when it is back, not redelivered after ack_wait."""
    monkeypatch.setenv("TAILRACE_CONN_NATS_DEFAULT", NATS)
    _with_js(NATS, lambda js: js.add_stream(name=stream.name, subjects=[stream.subject]))
    stream.publish(0, 3)
    trigger = _trigger(stream)

    async def scenario() -> tuple[list[str], str]:
        events = trigger.run()
        first = [(await anext(events)).dedup_key for _ in range(3)]
        await trigger._close()  # the server went away: the loop reconnects next
        await trigger.acknowledge(first)
        await asyncio.to_thread(stream.publish, 3, 1)
        fourth = (await anext(events)).dedup_key  # connected again
        await events.aclose()
        await trigger.cleanup()
        return first, fourth

    first, fourth = asyncio.run(scenario())
    assert (first, fourth) == (["1", "2", "3"], "4")
    # Only the fourth is unacknowledged: the first three were acknowledged on reconnect.
    assert stream.consumer().num_ack_pending == 1


def _consumer_exists(stream: Stream) -> bool:
    from nats.js.errors import NotFoundError

    try:
        stream.consumer()
    except NotFoundError:
        return False
    return True


@pytest.mark.exclusive
@pytest.mark.parametrize("db_backend", ["postgres"])
def test_kill_9_of_the_triggerer_mid_stream_loses_and_repeats_nothing(
    database_url: str, dags_folder: Path, engine: Engine, stream: Stream, sink: Engine
) -> None:
    # The trigger makes the stream; the publisher's first messages must not miss it.
    _with_js(NATS, lambda js: js.add_stream(name=stream.name, subjects=[stream.subject]))
    queue = QueueUnderTest(
        dag_id="nats_to_sink",
        dag_source=_consumer(stream, sink),
        env={"TAILRACE_CONN_NATS_DEFAULT": NATS},
        publish=stream.publish,
        drained=stream.drained,
        in_flight=stream.in_flight,
    )
    kill_the_triggerer_mid_stream(
        queue, database_url=database_url, dags_folder=dags_folder, engine=engine, sink=sink
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_server_down_at_start_is_retried_with_backoff_then_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tailrace.providers.nats import NatsJetStreamTrigger

    server_bin = shutil.which("nats-server")
    if server_bin is None:
        _unavailable("nats-server is not installed")
        return
    port = _free_port()
    url = f"nats://127.0.0.1:{port}"
    monkeypatch.setenv("TAILRACE_CONN_NATS_DOWN", url)
    own = Stream(url)
    trigger = NatsJetStreamTrigger(
        stream=own.name, subject=own.subject, durable="sink", nats_conn_id="nats_down"
    )
    caplog.set_level(logging.WARNING, logger="tailrace.triggers.NatsJetStreamTrigger")

    def retried() -> bool:
        return sum("unreachable" in r.getMessage() for r in caplog.records) >= 2

    async def scenario() -> Any:
        events = trigger.run()
        first = asyncio.ensure_future(anext(events))
        await asyncio.to_thread(wait_for, retried, 30)
        server = subprocess.Popen(
            [server_bin, "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(tmp_path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            # The trigger, reconnected, makes the stream; then the message reaches it.
            await asyncio.to_thread(wait_for, lambda: _consumer_exists(own), 60)
            await asyncio.to_thread(own.publish, 0, 1)
            event = await asyncio.wait_for(first, 60)
            await trigger.acknowledge([event.dedup_key])
            await asyncio.to_thread(wait_for, own.drained, 30)
            await events.aclose()
            await trigger.cleanup()
            return event
        finally:
            server.terminate()
            server.wait(timeout=30)

    event = asyncio.run(scenario())
    assert event.payload["body"] == "0"
    delays = [r.getMessage() for r in caplog.records if "unreachable" in r.getMessage()]
    assert "retrying in 0.5s" in delays[0] and "retrying in 1.0s" in delays[1]
