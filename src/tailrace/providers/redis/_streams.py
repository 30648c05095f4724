"""Reading a Redis stream with a consumer group, at least once from Redis and exactly once
into Tailrace: each entry is an event keyed by its entry id; it is acknowledged (``XACK``)
only when what it produced is durable, so a crash redelivers it, and the redelivery,
recognised by its id, is dropped."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tailrace.providers.common._queue import Delivery, PoisonMessage, QueueTrigger
from tailrace.sdk.connections import aget_connection

if TYPE_CHECKING:
    from redis.asyncio import Redis

# Entries that cannot be decoded go to ``<stream>:dead-letter`` with the reason.
DEAD_LETTER_SUFFIX = ":dead-letter"

_Entry = tuple[bytes, dict[bytes, bytes]]


class RedisStreamTrigger(QueueTrigger[_Entry, str]):
    """Yield the entries of Redis stream ``stream`` read through consumer group ``group``
    (created at ``start_id`` when missing: ``"0"`` for the whole stream, ``"$"`` for new
    entries only), each as ``{"id": entry_id, "fields": {name: value}}`` with the entry id
    as its ``dedup_key`` and checkpoint.

    Entries are read with ``XREADGROUP`` (``count`` at a time, waiting up to ``block_ms``),
    and acknowledged with ``XACK`` only when Tailrace has made what they produced durable
    (the asset events of a watcher, or the consuming task's output). Entries another
    consumer of the group read and left pending for ``claim_idle_ms`` — a triggerer that
    died — are taken over with ``XAUTOCLAIM`` and delivered again; those Tailrace stored
    already are recognised by their id and only acknowledged. An entry whose fields are
    not UTF-8 is moved to ``<stream>:dead-letter`` with the reason, and acknowledged.
    Redis down, or refusing the credentials: the trigger retries with backoff (logged)
    and resumes where it was.

    ``redis_conn_id`` names a connection (``TAILRACE_CONN_REDIS_DEFAULT=redis://...``).
    """

    broker = "Redis stream"

    def __init__(
        self,
        *,
        stream: str,
        group: str,
        redis_conn_id: str = "redis_default",
        start_id: str = "0",
        count: int = 500,
        block_ms: int = 1000,
        claim_idle_ms: int = 30_000,
    ) -> None:
        super().__init__()
        if count < 1 or block_ms < 1 or claim_idle_ms < 0:
            raise ValueError("count and block_ms must be positive, claim_idle_ms not negative")
        self.stream = stream
        self.group = group
        self.redis_conn_id = redis_conn_id
        self.start_id = start_id
        self.count = count
        self.block_ms = block_ms
        self.claim_idle_ms = claim_idle_ms
        # A consumer name of this run: a run after a crash is another consumer, and takes
        # the dead one's pending entries over once they are idle long enough.
        self.consumer = f"tailrace-{uuid.uuid4().hex[:12]}"
        self._client: Redis | None = None
        self._next_claim = 0.0

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "tailrace.providers.redis.RedisStreamTrigger",
            {
                "stream": self.stream,
                "group": self.group,
                "redis_conn_id": self.redis_conn_id,
                "start_id": self.start_id,
                "count": self.count,
                "block_ms": self.block_ms,
                "claim_idle_ms": self.claim_idle_ms,
            },
        )

    @property
    def source(self) -> str:
        return self.stream

    def _unreachable(self) -> tuple[type[BaseException], ...]:
        from redis.exceptions import ConnectionError as RedisConnectionError
        from redis.exceptions import TimeoutError as RedisTimeoutError

        return (RedisConnectionError, RedisTimeoutError, OSError)

    async def _connect(self) -> None:
        from redis.asyncio import Redis
        from redis.exceptions import ResponseError

        conn = await aget_connection(self.redis_conn_id)
        client: Redis = Redis.from_url(conn.uri, decode_responses=False)
        try:
            await client.xgroup_create(self.stream, self.group, id=self.start_id, mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                await client.aclose()
                raise
        self._client = client
        self.log.info("Consuming as %s of group %r", self.consumer, self.group)

    async def _pull(self) -> Sequence[_Entry]:
        entries: list[_Entry] = []
        if time.monotonic() >= self._next_claim:
            entries = await self._claim_idle()
            self._next_claim = time.monotonic() + max(self.claim_idle_ms / 2000, 0.5)
        return entries or await self._read_new()

    async def _read_new(self) -> list[_Entry]:
        assert self._client is not None
        reply: Any = await self._client.xreadgroup(
            self.group, self.consumer, {self.stream: ">"}, count=self.count, block=self.block_ms
        )
        return [entry for _, stream_entries in reply or [] for entry in stream_entries]

    async def _claim_idle(self) -> list[_Entry]:
        """Pending entries another consumer left idle (it died): ours now, delivered again."""
        assert self._client is not None
        claimed: list[_Entry] = []
        start: bytes | str = "0-0"
        while True:
            reply = await self._client.xautoclaim(
                self.stream,
                self.group,
                self.consumer,
                min_idle_time=self.claim_idle_ms,
                start_id=start,
                count=self.count,
            )
            start, entries = reply[0], reply[1]
            # Entries deleted from the stream meanwhile come back as None: nothing to read.
            claimed.extend((i, f) for i, f in entries if f is not None)
            if start in (b"0-0", "0-0") or len(claimed) >= self.count:
                return claimed

    def _decode(self, message: _Entry) -> Delivery[str]:
        entry_id, fields = message
        key = entry_id.decode()
        try:
            decoded = {k.decode(): v.decode() for k, v in fields.items()}
        except UnicodeDecodeError as exc:
            raise PoisonMessage(f"a field is not UTF-8: {exc}") from None
        return Delivery(key, {"id": key, "fields": decoded}, key)

    async def _dead_letter(self, message: _Entry, reason: str) -> None:
        assert self._client is not None
        entry_id, fields = message
        dead = {b"original_id": entry_id, b"reason": reason.encode(), **fields}
        await self._client.xadd(self.stream + DEAD_LETTER_SUFFIX, dead)  # type: ignore[arg-type]
        await self._client.xack(self.stream, self.group, entry_id)

    async def _dead_letter_handled(self, key: str, payload: Any, reason: str) -> bool:
        assert self._client is not None
        fields = payload.get("fields", {}) if isinstance(payload, dict) else {}
        dead = {"original_id": key, "reason": reason, **fields}
        await self._client.xadd(self.stream + DEAD_LETTER_SUFFIX, dead)
        return True

    async def _ack(self, receipts: list[str]) -> None:
        assert self._client is not None
        for i in range(0, len(receipts), 1000):
            await self._client.xack(self.stream, self.group, *receipts[i : i + 1000])

    async def _disconnect(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                await client.aclose()
            except Exception:  # a broken connection may fail to close: it is gone anyway
                self.log.debug("closing the Redis client failed", exc_info=True)
