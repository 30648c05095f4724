"""Server-Sent Events: a page's data pushed to the browser whenever it changes.

The api-server hears no events from the scheduler or the triggerer (they may run on other
machines), so each open stream re-reads its snapshot with the same cheap summarising
queries as the page's GET, every ``INTERVAL`` seconds, and sends it only when it differs
from the last one sent. See docs/adr/0010-web-ui.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from tailrace.api._context import ApiContext

INTERVAL = 0.5
# A comment line now and then keeps proxies from closing a quiet stream.
KEEPALIVE_SECONDS = 15.0
# A stream ends after this long and the browser reconnects (``retry``): no connection
# outlives a token, and a proxy's idle timeouts never bite.
MAX_SECONDS = 600.0
RETRY_MS = 1000


class EventStreamResponse(StreamingResponse):
    media_type = "text/event-stream"

    def __init__(self, content: AsyncIterator[str], status_code: int = 200) -> None:
        super().__init__(
            content,
            status_code=status_code,
            media_type=self.media_type,
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )


EVENT_STREAM: dict[int | str, dict[str, Any]] = {
    200: {
        "content": {"text/event-stream": {}},
        "description": "Server-Sent Events: `snapshot` events whose data is the JSON the "
        "matching GET returns, sent first and then whenever it changes.",
    }
}


def sse(event: str, data: str, event_id: str | None = None) -> str:
    lines = [f"event: {event}"]
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines.extend(f"data: {line}" for line in data.split("\n"))
    return "\n".join(lines) + "\n\n"


def snapshots(ctx: ApiContext, read: Callable[[], BaseModel]) -> EventStreamResponse:
    """Stream ``read()`` as JSON ``snapshot`` events: now, then on every change.

    The first read happens here, so a missing DAG or run is an ordinary 404.
    """
    first = read().model_dump_json()

    async def stream() -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        started = quiet_since = loop.time()
        last = first
        yield f"retry: {RETRY_MS}\n\n" + sse("snapshot", first)
        while not ctx.closing.is_set() and loop.time() - started < MAX_SECONDS:
            await asyncio.sleep(INTERVAL)
            current = (await run_in_threadpool(read)).model_dump_json()
            if current != last:
                last, quiet_since = current, loop.time()
                yield sse("snapshot", current)
            elif loop.time() - quiet_since > KEEPALIVE_SECONDS:
                quiet_since = loop.time()
                yield ": keep-alive\n\n"

    return EventStreamResponse(stream())
