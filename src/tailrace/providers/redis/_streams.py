"""Reading a Redis stream with a consumer group, at least once from Redis and exactly once
into Tailrace: each entry is an event keyed by its entry id; it is acknowledged (``XACK``)
only when what it produced is durable, so a crash redelivers it, and the redelivery,
recognised by its id, is dropped."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from tailrace.sdk.connections import aget_connection
from tailrace.sdk.triggers import BaseEventTrigger, TriggerEvent

if TYPE_CHECKING:
    from redis.asyncio import Redis

# Entries that cannot be decoded go to ``<stream>:dead-letter`` with the reason.
DEAD_LETTER_SUFFIX = ":dead-letter"
_RETRY_FIRST = 0.5
_RETRY_MAX = 30.0


class RedisStreamTrigger(BaseEventTrigger):
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

    async def _connect(self) -> Redis:
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
        return client

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from redis.exceptions import ConnectionError as RedisConnectionError
        from redis.exceptions import TimeoutError as RedisTimeoutError

        delay = _RETRY_FIRST
        next_claim = 0.0
        while True:
            try:
                if self._client is None:
                    self._client = await self._connect()
                    self.log.info(
                        "Reading Redis stream %r as %s of group %r",
                        self.stream,
                        self.consumer,
                        self.group,
                    )
                entries: list[tuple[bytes, dict[bytes, bytes]]] = []
                if time.monotonic() >= next_claim:
                    entries = await self._claim_idle()
                    next_claim = time.monotonic() + max(self.claim_idle_ms / 2000, 0.5)
                if not entries:
                    entries = await self._read_new()
                delay = _RETRY_FIRST
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                self.log.warning(
                    "Redis stream %r unreachable (%s); retrying in %.1fs", self.stream, exc, delay
                )
                await self._drop_client()
                await asyncio.sleep(delay)
                delay = min(delay * 2, _RETRY_MAX)
                continue
            for entry_id, fields in entries:
                event = await self._event(entry_id, fields)
                if event is not None:
                    yield event

    async def _read_new(self) -> list[tuple[bytes, dict[bytes, bytes]]]:
        assert self._client is not None
        reply: Any = await self._client.xreadgroup(
            self.group, self.consumer, {self.stream: ">"}, count=self.count, block=self.block_ms
        )
        return [entry for _, stream_entries in reply or [] for entry in stream_entries]

    async def _claim_idle(self) -> list[tuple[bytes, dict[bytes, bytes]]]:
        """Pending entries another consumer left idle (it died): ours now, delivered again."""
        assert self._client is not None
        claimed: list[tuple[bytes, dict[bytes, bytes]]] = []
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

    async def _event(self, entry_id: bytes, fields: dict[bytes, bytes]) -> TriggerEvent | None:
        key = entry_id.decode()
        try:
            decoded = {k.decode(): v.decode() for k, v in fields.items()}
        except UnicodeDecodeError as exc:
            await self._dead_letter(key, fields, f"a field is not UTF-8: {exc}")
            return None
        return TriggerEvent({"id": key, "fields": decoded}, checkpoint=key, dedup_key=key)

    async def _dead_letter(self, key: str, fields: dict[bytes, bytes], reason: str) -> None:
        assert self._client is not None
        self.log.error(
            "Entry %s of %r moved to the dead-letter stream: %s", key, self.stream, reason
        )
        dead = {b"original_id": key.encode(), b"reason": reason.encode(), **fields}
        await self._client.xadd(self.stream + DEAD_LETTER_SUFFIX, dead)  # type: ignore[arg-type]
        await self._client.xack(self.stream, self.group, key)

    async def acknowledge(self, dedup_keys: list[str]) -> None:
        client = self._client
        if client is None:  # reconnecting: they are redelivered and acknowledged then
            raise ConnectionError(f"not connected to Redis for stream {self.stream!r}")
        for i in range(0, len(dedup_keys), 1000):
            await client.xack(self.stream, self.group, *dedup_keys[i : i + 1000])

    async def _drop_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                await client.aclose()
            except Exception:  # a broken connection may fail to close: it is gone anyway
                self.log.debug("closing the Redis client failed", exc_info=True)

    async def cleanup(self) -> None:
        await self._drop_client()
