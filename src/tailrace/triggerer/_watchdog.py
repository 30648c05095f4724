"""Name the trigger that blocks the event loop.

A ticker coroutine stamps the time every few tens of milliseconds. A thread watches the
stamp; when it goes stale past the threshold, the loop thread is stuck in some callback,
and its current stack tells which trigger: the frame whose ``self`` is a trigger we run.
The warning names the trigger and its task, in the triggerer's log and the task's own.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tailrace.triggerer._triggerer import Running, Triggerer

log = logging.getLogger("tailrace.triggerer")
TICK = 0.02


class LoopWatchdog:
    def __init__(self, triggerer: Triggerer, threshold: float) -> None:
        self.triggerer = triggerer
        self.threshold = threshold
        self._stamp = time.monotonic()
        self._stop = threading.Event()
        self._loop_thread: int | None = None
        self._ticker: asyncio.Task[None] | None = None
        self.warnings: list[str] = []

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop_thread = threading.get_ident()
        self._ticker = loop.create_task(self._tick(), name="triggerer-watchdog-tick")
        threading.Thread(target=self._watch, name="triggerer-watchdog", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.cancel()

    async def _tick(self) -> None:
        while True:
            self._stamp = time.monotonic()
            await asyncio.sleep(TICK)

    def _watch(self) -> None:
        warned_for: float | None = None
        while not self._stop.wait(TICK):
            stamp = self._stamp
            stuck = time.monotonic() - stamp
            if stuck > self.threshold and warned_for != stamp:
                warned_for = stamp
                self._warn(stuck)

    def _culprit(self) -> Running | None:
        from tailrace.sdk import BaseTrigger

        frame = sys._current_frames().get(self._loop_thread or -1)
        while frame is not None:
            candidate = frame.f_locals.get("self")
            if isinstance(candidate, BaseTrigger):
                for running in list(self.triggerer.running.values()):
                    if running.trigger is candidate:
                        return running
            frame = frame.f_back
        return None

    def _warn(self, stuck: float) -> None:
        running = self._culprit()
        if running is None:
            message = (
                f"the triggerer's event loop has been blocked for {stuck:.2f}s by code that "
                "is not a trigger we run"
            )
            log.warning(message)
        else:
            message = (
                f"trigger {running.trigger_id} ({type(running.trigger).__name__}) for "
                f"{running.label} has blocked the triggerer's event loop for {stuck:.2f}s: "
                "every other trigger waits meanwhile. Triggers must await, never block — use "
                "asyncio.sleep, async clients, or asyncio.to_thread for blocking calls"
            )
            log.warning(message)
            if running.log_path is not None:
                stamp = datetime.now(UTC).isoformat(timespec="milliseconds")
                self.triggerer.router.write(
                    running.log_path, f"[{stamp}] {{triggerer}} WARNING - {message}"
                )
        self.warnings.append(message)
