"""The loop every message-queue trigger shares: connect, pull a batch, turn each message
into an event keyed by its id (or dead-letter it), back off while the broker is down,
and acknowledge to the broker only what Tailrace made durable.

A broker is a small adapter over it: connect and disconnect, pull a batch, decode one
message, dead-letter one, acknowledge receipts. An offset-based broker (Kafka) fits as
is: the offset is the key and checkpoint, ``_connect`` seeks past ``self.checkpoint``,
and ``_ack`` commits the highest offset of each partition among the receipts.
"""

from __future__ import annotations

import asyncio
from abc import abstractmethod
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from tailrace.sdk.triggers import BaseEventTrigger, TriggerEvent

M = TypeVar("M")  # a message as the client delivers it
R = TypeVar("R")  # what the broker needs to acknowledge one

RETRY_FIRST = 0.5
RETRY_MAX = 30.0


@dataclass(frozen=True, slots=True)
class Delivery(Generic[R]):
    """A decoded message: its id (the event's ``dedup_key`` and checkpoint), the event
    payload, and the receipt that acknowledges it."""

    key: str
    payload: Any
    receipt: R


class PoisonMessage(Exception):
    """Raised by ``_decode``: the message cannot become an event (why: ``reason``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class QueueTrigger(BaseEventTrigger, Generic[M, R]):
    """A streaming trigger reading a broker, at least once from the broker and exactly
    once into Tailrace (see ``docs/concepts/queues.md``)."""

    # "Redis stream", "RabbitMQ queue": how the log names the source.
    broker: ClassVar[str]
    # Whether a receipt stays valid when the connection it came on is gone (an id, an
    # offset, a reply subject) or dies with it (a channel's delivery tag: the broker
    # requeues those itself).
    receipts_survive_reconnect: ClassVar[bool] = True

    def __init__(self) -> None:
        super().__init__()
        self._connected = False
        # Delivered and not yet acknowledged, by key: a broker may deliver a message again
        # before the first copy is acknowledged (a reconnect, a claim).
        self._unacked: dict[str, list[R]] = {}
        # Acknowledgements asked for while reconnecting (receipts that survive it): sent
        # as soon as the connection is back, not left for the broker to redeliver.
        self._owed: list[R] = []
        self._stopping = False

    # -- the adapter ----------------------------------------------------------------------

    @property
    @abstractmethod
    def source(self) -> str:
        """The queue's name, for the log."""

    @abstractmethod
    def _unreachable(self) -> tuple[type[BaseException], ...]:
        """The client's exceptions meaning "the broker is down or refused us": retried."""

    @abstractmethod
    async def _connect(self) -> None:
        """Connect, and declare what is missing (a group, a durable queue, a consumer)."""

    @abstractmethod
    async def _disconnect(self) -> None:
        """Close the connection; it may be broken already, so never raise."""

    @abstractmethod
    async def _pull(self) -> Sequence[M]:
        """The next messages: wait a moment for at least one, return what came (or none)."""

    @abstractmethod
    def _decode(self, message: M) -> Delivery[R]:
        """The message as an event, or :class:`PoisonMessage` with the reason."""

    async def _dead_letter(self, message: M, reason: str) -> None:
        """Move a poison message to the broker's dead letters, and acknowledge it (a broker
        whose ``_decode`` raises :class:`PoisonMessage` overrides this)."""
        raise TypeError(f"{type(self).__name__} has no dead letters for: {reason}")

    async def _dead_letter_handled(self, key: str, payload: Any, reason: str) -> bool:
        """Copy a message whose handling failed every try (its event's payload) to the
        broker's dead letters; False: this broker has none of Tailrace's naming."""
        return False

    @abstractmethod
    async def _ack(self, receipts: list[R]) -> None:
        """Acknowledge these messages to the broker."""

    # -- the loop -------------------------------------------------------------------------

    def stop_gracefully(self) -> bool:
        self._stopping = True
        return True

    async def run(self) -> AsyncIterator[TriggerEvent]:
        delay = RETRY_FIRST
        while not self._stopping:
            try:
                if not self._connected:
                    await self._connect()
                    self._connected = True
                    self.log.info("Reading %s %r", self.broker, self.source)
                    await self._ack_owed()
                events = await self._next_events()
                delay = RETRY_FIRST
            except self._unreachable() as exc:
                self.log.warning(
                    "%s %r unreachable (%s); retrying in %.1fs",
                    self.broker,
                    self.source,
                    _reason(exc),
                    delay,
                )
                await self._close()
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)
                continue
            for event in events:
                yield event
        # Paused: what was pulled is yielded; the stream ends once it is handled, and the
        # triggerer acknowledges it to the broker before it closes the connection.
        self.log.info("Stopped reading %s %r: the DAG was paused", self.broker, self.source)

    async def _next_events(self) -> list[TriggerEvent]:
        events = []
        for message in await self._pull():
            try:
                delivery = self._decode(message)
            except PoisonMessage as poison:
                self.log.error(
                    "A message of %s %r moved to the dead letters: %s",
                    self.broker,
                    self.source,
                    poison.reason,
                )
                await self._dead_letter(message, poison.reason)
                continue
            self._unacked.setdefault(delivery.key, []).append(delivery.receipt)
            key = delivery.key
            events.append(TriggerEvent(delivery.payload, checkpoint=key, dedup_key=key))
        return events

    async def dead_letter(self, letters: list[tuple[str, Any, str]]) -> bool:
        copied = False
        for key, payload, reason in letters:
            copied = await self._dead_letter_handled(key, payload, reason) or copied
        if copied:
            self.log.warning(
                "%d message(s) of %s %r whose handling failed every try moved to the dead letters",
                len(letters),
                self.broker,
                self.source,
            )
        return copied

    async def acknowledge(self, dedup_keys: list[str]) -> None:
        receipts = [r for key in dedup_keys for r in self._unacked.pop(key, [])]
        if not receipts:
            return
        if not self._connected:
            # Reconnecting: acknowledged once connected again. Receipts of a dead channel
            # are nothing to report: the broker delivers those messages again, they are
            # recognised by their key and acknowledged then.
            if self.receipts_survive_reconnect:
                self._owed.extend(receipts)
            return
        await self._ack(receipts)

    async def _ack_owed(self) -> None:
        owed, self._owed = self._owed, []
        if not owed:
            return
        try:
            await self._ack(owed)
        except Exception as exc:  # e.g. a receipt that expired meanwhile
            self.log.warning(
                "Could not acknowledge %d messages of %s %r after reconnecting (%s): "
                "redelivered, they are recognised and acknowledged then",
                len(owed),
                self.broker,
                self.source,
                _reason(exc),
            )

    async def _close(self) -> None:
        if not self.receipts_survive_reconnect:
            self._unacked.clear()
        self._connected = False
        await self._disconnect()

    async def cleanup(self) -> None:
        await self._close()


def _reason(exc: BaseException) -> str:
    """An error for a log line: its message, or its type when it has none (asyncio's
    TimeoutError)."""
    return str(exc) or type(exc).__name__
