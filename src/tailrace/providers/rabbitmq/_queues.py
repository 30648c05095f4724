"""Consuming a RabbitMQ queue at least once from the broker and exactly once into
Tailrace: each message is an event keyed by its ``message_id``; it is acknowledged only
when what it produced is durable, so a crash requeues it, and the redelivery, recognised
by its id, is dropped."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tailrace.providers.common._queue import Delivery, PoisonMessage, QueueTrigger
from tailrace.sdk.connections import aget_connection

if TYPE_CHECKING:
    from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage

# Messages that cannot be handled go to ``<queue>.dead-letter`` with the reason.
DEAD_LETTER_SUFFIX = ".dead-letter"
# How long a pull waits for a first message before looking at the channel again.
_WAIT = 1.0


# A receipt: the channel's generation (delivery tags restart on each channel) and the message.
_Receipt = tuple[int, "AbstractIncomingMessage"]


class RabbitMQQueueTrigger(QueueTrigger["AbstractIncomingMessage", _Receipt]):
    """Yield the messages of durable queue ``queue`` (declared if missing), each as
    ``{"id": message_id, "body": text, "headers": {...}}`` with its ``message_id`` as the
    event's ``dedup_key`` and checkpoint.

    Messages are consumed with manual acknowledgement, at most ``prefetch`` unacknowledged
    at a time, and acknowledged only when Tailrace has made what they produced durable
    (the asset events of a watcher, or the consuming task's output). A triggerer that dies
    leaves them unacknowledged: RabbitMQ delivers them again to the next, which recognises
    those it stored already by their id and only acknowledges them. Publishers must set
    ``message_id``; a message without one, or whose body is not UTF-8, is moved to
    ``<queue>.dead-letter`` (a durable queue) with the reason in its ``x-tailrace-reason``
    header, and acknowledged. The broker down or refusing the credentials: the trigger
    retries with backoff (logged) and resumes.

    ``rabbitmq_conn_id`` names a connection (``TAILRACE_CONN_RABBITMQ_DEFAULT=amqp://...``).
    """

    broker = "RabbitMQ queue"
    # Delivery tags belong to their channel; a closed channel's messages are requeued.
    receipts_survive_reconnect = False

    def __init__(
        self, *, queue: str, rabbitmq_conn_id: str = "rabbitmq_default", prefetch: int = 500
    ) -> None:
        super().__init__()
        if prefetch < 1:
            raise ValueError("prefetch must be at least 1")
        self.queue = queue
        self.rabbitmq_conn_id = rabbitmq_conn_id
        self.prefetch = prefetch
        self._connection: AbstractConnection | None = None
        self._channel: AbstractChannel | None = None
        self._inbox: asyncio.Queue[AbstractIncomingMessage] = asyncio.Queue()
        self._generation = 0
        # Delivery tags of the channel delivered and not yet acknowledged, in delivery
        # order: a run of acknowledged ones at the front is one ``multiple=True`` ack.
        self._outstanding: dict[int, None] = {}

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "tailrace.providers.rabbitmq.RabbitMQQueueTrigger",
            {
                "queue": self.queue,
                "rabbitmq_conn_id": self.rabbitmq_conn_id,
                "prefetch": self.prefetch,
            },
        )

    @property
    def source(self) -> str:
        return self.queue

    def _unreachable(self) -> tuple[type[BaseException], ...]:
        from aio_pika.exceptions import AMQPError

        return (AMQPError, OSError, ConnectionError)

    async def _connect(self) -> None:
        import aio_pika

        conn = await aget_connection(self.rabbitmq_conn_id)
        self._connection = await aio_pika.connect(conn.uri)
        self._channel = await self._connection.channel()
        await self._channel.set_qos(prefetch_count=self.prefetch)
        queue = await self._channel.declare_queue(self.queue, durable=True)
        self._inbox = asyncio.Queue()
        self._generation += 1
        self._outstanding = {}
        await queue.consume(self._inbox.put)

    async def _pull(self) -> Sequence[AbstractIncomingMessage]:
        channel = self._channel
        assert channel is not None
        try:
            first = await asyncio.wait_for(self._inbox.get(), _WAIT)
        except TimeoutError:
            if channel.is_closed or self._connection is None or self._connection.is_closed:
                raise ConnectionError(f"the channel of queue {self.queue!r} closed") from None
            return []
        messages = [first]
        while len(messages) < self.prefetch and not self._inbox.empty():
            messages.append(self._inbox.get_nowait())
        self._outstanding.update(dict.fromkeys(self._tag(m) for m in messages))
        return messages

    @staticmethod
    def _tag(message: AbstractIncomingMessage) -> int:
        tag = message.delivery_tag
        assert tag is not None  # consumed with manual acknowledgement
        return tag

    def _decode(self, message: AbstractIncomingMessage) -> Delivery[_Receipt]:
        key = message.message_id
        if not key:
            raise PoisonMessage("the message has no message_id")
        try:
            body = message.body.decode()
        except UnicodeDecodeError as exc:
            raise PoisonMessage(f"the body is not UTF-8: {exc}") from None
        headers = {
            k: v if isinstance(v, str | int | float | bool) else str(v)
            for k, v in (message.headers or {}).items()
        }
        payload = {"id": key, "body": body, "headers": headers}
        return Delivery(key, payload, (self._generation, message))

    async def _dead_letter(self, message: AbstractIncomingMessage, reason: str) -> None:
        import aio_pika

        assert self._channel is not None
        dead = self.queue + DEAD_LETTER_SUFFIX
        await self._channel.declare_queue(dead, durable=True)
        await self._channel.default_exchange.publish(
            aio_pika.Message(
                message.body,
                headers={**(message.headers or {}), "x-tailrace-reason": reason},
                message_id=message.message_id,
                delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            ),
            routing_key=dead,
        )
        await message.ack()
        self._outstanding.pop(self._tag(message), None)

    async def _dead_letter_handled(self, key: str, payload: Any, reason: str) -> bool:
        import aio_pika

        assert self._channel is not None
        dead = self.queue + DEAD_LETTER_SUFFIX
        await self._channel.declare_queue(dead, durable=True)
        await self._channel.default_exchange.publish(
            aio_pika.Message(
                str(payload.get("body", "")).encode(),
                headers={**payload.get("headers", {}), "x-tailrace-reason": reason},
                message_id=key,
                delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            ),
            routing_key=dead,
        )
        return True

    async def _ack(self, receipts: list[_Receipt]) -> None:
        # One delivered on a channel since closed was requeued by the broker: it comes
        # again, is recognised, and is acknowledged then.
        if self._channel is None or self._channel.is_closed:
            return
        done = {
            self._tag(m): m
            for generation, m in receipts
            if generation == self._generation and self._tag(m) in self._outstanding
        }
        # The oldest outstanding deliveries, all acknowledged now: one ack with
        # multiple=True covers them (it covers every earlier tag on the channel).
        last = None
        for tag in self._outstanding:
            if tag not in done:
                break
            last = tag
        if last is not None:
            await done[last].ack(multiple=True)
            for tag in [t for t in self._outstanding if t <= last]:
                del self._outstanding[tag]
                del done[tag]
        for tag, message in done.items():
            await message.ack()
            del self._outstanding[tag]

    async def _disconnect(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None:
            try:
                await connection.close()
            except Exception:  # a broken connection may fail to close: it is gone anyway
                self.log.debug("closing the RabbitMQ connection failed", exc_info=True)
