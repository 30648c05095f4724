"""A thread with an event loop of its own, for a trigger that keeps blocking the shared one.

A new instance of the trigger starts here from its last checkpoint (what the first one
opened belongs to the shared loop): its steps run here, while the shared loop only awaits
their results, so its blocking calls delay nobody but itself.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop when it is installed, else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


class OwnLoop:
    def __init__(self, name: str) -> None:
        self.loop = (loop_factory() or asyncio.new_event_loop)()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        try:
            self.loop.run_forever()
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        finally:
            self.loop.close()

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` run on this loop. Cancelling the caller cancels it there too; the
        context (the trigger's log file) goes with it."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    async def run_last(self, coro: Coroutine[Any, Any, T]) -> T:
        """Like run(), once whatever still runs here (a cancelled step) has ended."""

        async def after_the_rest() -> T:
            me = asyncio.current_task()
            rest = [t for t in asyncio.all_tasks() if t is not me]
            await asyncio.gather(*rest, return_exceptions=True)
            return await coro

        return await self.run(after_the_rest())

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
