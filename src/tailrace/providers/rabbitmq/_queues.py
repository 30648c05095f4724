"""Consuming a RabbitMQ queue at least once from the broker and exactly once into
Tailrace: each message is an event keyed by its ``message_id``; it is acknowledged only
when what it produced is durable, so a crash requeues it, and the redelivery, recognised
by its id, is dropped."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from tailrace.sdk.connections import aget_connection
from tailrace.sdk.triggers import BaseEventTrigger, TriggerEvent

if TYPE_CHECKING:
    from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage

# Messages that cannot be handled go to ``<queue>.dead-letter`` with the reason.
DEAD_LETTER_SUFFIX = ".dead-letter"
_RETRY_FIRST = 0.5
_RETRY_MAX = 30.0


class RabbitMQQueueTrigger(BaseEventTrigger):
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
        # Delivered and not yet acknowledged on the current channel, by message id.
        self._unacked: dict[str, list[AbstractIncomingMessage]] = {}

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "tailrace.providers.rabbitmq.RabbitMQQueueTrigger",
            {
                "queue": self.queue,
                "rabbitmq_conn_id": self.rabbitmq_conn_id,
                "prefetch": self.prefetch,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        import aio_pika
        from aio_pika.exceptions import AMQPError

        delay = _RETRY_FIRST
        while True:
            try:
                conn = await aget_connection(self.rabbitmq_conn_id)
                self._connection = await aio_pika.connect(conn.uri)
                self._channel = await self._connection.channel()
                await self._channel.set_qos(prefetch_count=self.prefetch)
                queue = await self._channel.declare_queue(self.queue, durable=True)
                self.log.info("Consuming RabbitMQ queue %r", self.queue)
                async with queue.iterator() as messages:
                    async for message in messages:
                        delay = _RETRY_FIRST
                        event = await self._event(message)
                        if event is not None:
                            yield event
            except (AMQPError, OSError, ConnectionError) as exc:
                self.log.warning(
                    "RabbitMQ queue %r unreachable (%s); retrying in %.1fs", self.queue, exc, delay
                )
                await self._close()
                await asyncio.sleep(delay)
                delay = min(delay * 2, _RETRY_MAX)

    async def _event(self, message: AbstractIncomingMessage) -> TriggerEvent | None:
        key = message.message_id
        if not key:
            await self._dead_letter(message, "the message has no message_id")
            return None
        try:
            body = message.body.decode()
        except UnicodeDecodeError as exc:
            await self._dead_letter(message, f"the body is not UTF-8: {exc}")
            return None
        self._unacked.setdefault(key, []).append(message)
        headers = {
            k: v if isinstance(v, str | int | float | bool) else str(v)
            for k, v in (message.headers or {}).items()
        }
        payload = {"id": key, "body": body, "headers": headers}
        return TriggerEvent(payload, checkpoint=key, dedup_key=key)

    async def _dead_letter(self, message: AbstractIncomingMessage, reason: str) -> None:
        import aio_pika

        assert self._channel is not None
        self.log.error("A message of %r moved to the dead-letter queue: %s", self.queue, reason)
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

    async def acknowledge(self, dedup_keys: list[str]) -> None:
        for key in dedup_keys:
            for message in self._unacked.pop(key, []):
                # One delivered on a channel since closed was requeued by the broker: it
                # comes again, is recognised, and is acknowledged then.
                if self._channel is not None and not self._channel.is_closed:
                    await message.ack()

    async def _close(self) -> None:
        self._unacked.clear()
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None:
            try:
                await connection.close()
            except Exception:  # a broken connection may fail to close: it is gone anyway
                self.log.debug("closing the RabbitMQ connection failed", exc_info=True)

    async def cleanup(self) -> None:
        await self._close()
