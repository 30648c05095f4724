"""Reading a NATS JetStream stream with a durable pull consumer, at least once from NATS
and exactly once into Tailrace: each message is an event keyed by its stream sequence;
it is acknowledged (``+ACK``) only when what it produced is durable, so a crash leaves
it to be redelivered after ``ack_wait``, and the redelivery, recognised by its sequence,
is dropped."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tailrace.providers.common._queue import Delivery, PoisonMessage, QueueTrigger
from tailrace.sdk.connections import aget_connection

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg
    from nats.js import JetStreamContext

# Poison messages are published to ``tailrace.dead-letter.<stream>``, kept by the stream
# ``<stream>`` + DEAD_LETTER_SUFFIX (declared if missing), with the reason in a header.
DEAD_LETTER_SUFFIX = "-dead-letter"
_ACK = b"+ACK"
_TERM = b"+TERM"


class NatsJetStreamTrigger(QueueTrigger["Msg", str]):
    """Yield the messages of JetStream stream ``stream`` read by durable pull consumer
    ``durable`` (both created if missing; a new stream takes ``subject``, a new consumer
    filters on it), each as ``{"id": sequence, "subject": ..., "body": text, "headers":
    {...}}`` with the stream sequence as its ``dedup_key`` and checkpoint.

    Messages are fetched ``batch`` at a time (waiting up to ``fetch_timeout`` seconds)
    and acknowledged explicitly only when Tailrace has made what they produced durable
    (the asset events of a watcher, or the consuming task's output). A triggerer that
    dies leaves them unacknowledged: JetStream delivers them again after ``ack_wait``
    seconds, and those Tailrace stored already are recognised by their sequence and only
    acknowledged. A message whose body is not UTF-8 is published to the dead-letter
    subject ``tailrace.dead-letter.<stream>`` (kept by the stream ``<stream>-dead-letter``)
    with the reason in its ``Tailrace-Reason`` header and its sequence in
    ``Tailrace-Original-Sequence``, then terminated (``+TERM``: never redelivered). The
    server down, or refusing the credentials: the trigger retries with backoff (logged)
    and resumes.

    ``nats_conn_id`` names a connection (``TAILRACE_CONN_NATS_DEFAULT=nats://...``).
    """

    broker = "NATS JetStream stream"

    def __init__(
        self,
        *,
        stream: str,
        subject: str,
        durable: str,
        nats_conn_id: str = "nats_default",
        batch: int = 500,
        fetch_timeout: float = 1.0,
        ack_wait: float = 30.0,
    ) -> None:
        super().__init__()
        if batch < 1 or fetch_timeout <= 0 or ack_wait <= 0:
            raise ValueError("batch, fetch_timeout and ack_wait must be positive")
        self.stream = stream
        self.subject = subject
        self.durable = durable
        self.nats_conn_id = nats_conn_id
        self.batch = batch
        self.fetch_timeout = fetch_timeout
        self.ack_wait = ack_wait
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._sub: JetStreamContext.PullSubscription | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "tailrace.providers.nats.NatsJetStreamTrigger",
            {
                "stream": self.stream,
                "subject": self.subject,
                "durable": self.durable,
                "nats_conn_id": self.nats_conn_id,
                "batch": self.batch,
                "fetch_timeout": self.fetch_timeout,
                "ack_wait": self.ack_wait,
            },
        )

    @property
    def source(self) -> str:
        return self.stream

    @property
    def dead_letter_subject(self) -> str:
        return f"tailrace.dead-letter.{self.stream}"

    def _unreachable(self) -> tuple[type[BaseException], ...]:
        from nats import errors
        from nats.js.errors import NoStreamResponseError, ServiceUnavailableError

        return (
            errors.NoServersError,
            errors.ConnectionClosedError,
            errors.ConnectionReconnectingError,
            errors.StaleConnectionError,
            errors.UnexpectedEOF,
            errors.AuthorizationError,
            errors.NoRespondersError,  # JetStream not (yet) answering
            errors.OutboundBufferLimitError,
            ServiceUnavailableError,
            NoStreamResponseError,
            OSError,
        )

    async def _connect(self) -> None:
        import nats
        from nats.js.api import AckPolicy, ConsumerConfig
        from nats.js.errors import NotFoundError

        conn = await aget_connection(self.nats_conn_id)

        async def on_error(exc: Exception) -> None:
            self.log.debug("NATS client error: %s", exc)

        # No reconnecting inside the client: a lost server surfaces as an error here, and
        # the shared loop backs off and reconnects (logged). (The client tries a server
        # once more than ``max_reconnect_attempts`` before giving up; 0 means forever.)
        nc = await nats.connect(
            conn.uri,
            allow_reconnect=False,
            connect_timeout=2,
            max_reconnect_attempts=1,
            reconnect_time_wait=0,
            error_cb=on_error,
        )
        try:
            js = nc.jetstream()
            for name, subject in (
                (self.stream, self.subject),
                (self.stream + DEAD_LETTER_SUFFIX, self.dead_letter_subject),
            ):
                try:
                    await js.stream_info(name)
                except NotFoundError:
                    await js.add_stream(name=name, subjects=[subject])
            config = ConsumerConfig(
                durable_name=self.durable,
                ack_policy=AckPolicy.EXPLICIT,
                ack_wait=self.ack_wait,
                max_ack_pending=-1,
            )
            self._sub = await js.pull_subscribe(
                self.subject, durable=self.durable, stream=self.stream, config=config
            )
        except BaseException:
            await nc.close()
            raise
        self._nc, self._js = nc, js

    async def _pull(self) -> Sequence[Msg]:
        assert self._sub is not None and self._nc is not None
        if self._nc.is_closed:
            raise ConnectionError(f"the connection to NATS for stream {self.stream!r} closed")
        try:
            return await self._sub.fetch(self.batch, timeout=self.fetch_timeout)
        except TimeoutError:
            # Nothing came in time. nats-py raises its own TimeoutError, or asyncio's
            # (the builtin, an OSError) when the deadline runs out between its two pull
            # requests: never "the server is down", which would reconnect and leave what
            # was fetched to be redelivered only after ack_wait.
            if self._nc.is_closed:
                raise ConnectionError(
                    f"the connection to NATS for stream {self.stream!r} closed"
                ) from None
            return []

    def _decode(self, message: Msg) -> Delivery[str]:
        key = str(message.metadata.sequence.stream)
        try:
            body = message.data.decode()
        except UnicodeDecodeError as exc:
            raise PoisonMessage(f"the body is not UTF-8: {exc}") from None
        payload = {
            "id": key,
            "subject": message.subject,
            "body": body,
            "headers": dict(message.headers or {}),
        }
        return Delivery(key, payload, message.reply)

    async def _dead_letter(self, message: Msg, reason: str) -> None:
        assert self._js is not None and self._nc is not None
        headers = {
            **(message.headers or {}),
            "Tailrace-Reason": reason,
            "Tailrace-Original-Sequence": str(message.metadata.sequence.stream),
        }
        await self._js.publish(self.dead_letter_subject, message.data, headers=headers)
        await self._nc.publish(message.reply, _TERM)

    async def _dead_letter_handled(self, key: str, payload: Any, reason: str) -> bool:
        assert self._js is not None
        headers = {
            **payload.get("headers", {}),
            "Tailrace-Reason": reason,
            "Tailrace-Original-Sequence": key,
        }
        body = str(payload.get("body", "")).encode()
        await self._js.publish(self.dead_letter_subject, body, headers=headers)
        return True

    async def _ack(self, receipts: list[str]) -> None:
        # A reply subject answers on any connection: one fetched before a reconnect is
        # acknowledged as well (unless ack_wait ran out, and JetStream redelivered it).
        nc = self._nc
        assert nc is not None
        for reply in receipts:
            await nc.publish(reply, _ACK)
        await nc.flush()

    async def _disconnect(self) -> None:
        nc, self._nc, self._js, self._sub = self._nc, None, None, None
        if nc is not None and not nc.is_closed:
            try:
                await nc.close()
            except Exception:  # a broken connection may fail to close: it is gone anyway
                self.log.debug("closing the NATS connection failed", exc_info=True)
