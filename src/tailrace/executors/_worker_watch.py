"""Which Celery workers are alive: their heartbeats, heard through the broker (ADR 0024).

Every `tailrace worker` publishes Celery's worker events (``worker-online``, a
``worker-heartbeat`` every two seconds, ``worker-offline`` when it stops) on the broker's
event exchange — Redis pub/sub or a RabbitMQ topic exchange, the same Celery machinery on
both. A scheduler listens from a thread of its own. A worker unheard for
``worker_lost_timeout`` is lost, and so are the tries it was running.

The watch judges only what it could have heard: until it has been connected to the broker
for a whole timeout (after it starts, and after every reconnection) it gives no verdict,
so a broker outage or a scheduler restart never makes live workers look dead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from tailrace.executors.base import WorkerVerdict

log = logging.getLogger(__name__)

RECONNECT_SECONDS = 1.0


class WorkerWatch:
    def __init__(
        self,
        app: Any,
        lost_after: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # Called (from the watch's thread) when a worker is found lost.
        self.on_lost: Callable[[], None] = lambda: None
        self._app = app
        self._lost_after = lost_after
        self._clock = clock
        self._lock = threading.Lock()
        # Node name -> (monotonic time, wall time) it was last heard.
        self._heard: dict[str, tuple[float, datetime]] = {}
        # Workers found lost but not yet handled by the scheduler (node name -> last heard).
        self._lost: dict[str, datetime] = {}
        self._connected_at: float | None = None
        self._stopping = threading.Event()
        self._receiver: Any = None
        self._thread: threading.Thread | None = None

    # -- the listening thread ------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._listen, name="celery-worker-watch", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._receiver is not None:
            self._receiver.should_stop = True
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _listen(self) -> None:
        handlers = {
            "worker-online": self._heartbeat,
            "worker-heartbeat": self._heartbeat,
            "worker-offline": self._offline,
        }
        while not self._stopping.is_set():
            try:
                with self._app.connection_for_read() as conn:
                    receiver = self._app.events.Receiver(
                        conn, handlers=handlers, routing_key="worker.#"
                    )
                    # Called once the event queue is bound: from now on nothing is missed.
                    receiver.on_consume_ready = self._connected
                    # At least once a second, events or not: silence is noticed promptly.
                    receiver.on_iteration = self._look
                    self._receiver = receiver
                    if self._stopping.is_set():
                        return
                    receiver.capture(limit=None, timeout=None, wakeup=False)
            except Exception as exc:
                log.warning(
                    "lost the broker's worker events (%s); reconnecting in %.0fs",
                    exc,
                    RECONNECT_SECONDS,
                )
            with self._lock:
                self._connected_at = None
            self._stopping.wait(RECONNECT_SECONDS)

    def _connected(self, *args: object, **kwargs: object) -> None:
        with self._lock:
            self._connected_at = self._clock()

    def _look(self) -> None:
        with self._lock:
            found = self._sound(self._clock()) and self._expire(self._clock())
        if found:
            self.on_lost()

    def _sound(self, now: float) -> bool:
        return self._connected_at is not None and now - self._connected_at >= self._lost_after

    def _expire(self, now: float) -> bool:
        """Move workers silent too long to the lost; True if there were any."""
        found = False
        for name, (at, wall) in list(self._heard.items()):
            if now - at > self._lost_after:
                del self._heard[name]
                self._lost[name] = wall
                found = True
        return found

    def _heartbeat(self, event: dict[str, Any]) -> None:
        name = event.get("hostname")
        if isinstance(name, str):
            with self._lock:
                self._heard[name] = (self._clock(), datetime.now(UTC))
                self._lost.pop(name, None)

    def _offline(self, event: dict[str, Any]) -> None:
        name = event.get("hostname")
        if isinstance(name, str):
            with self._lock:
                heard = self._heard.pop(name, None)
                self._lost[name] = heard[1] if heard else datetime.now(UTC)
            self.on_lost()

    # -- what the scheduler asks -----------------------------------------------------------

    def verdict(self) -> WorkerVerdict | None:
        """The live workers and the newly lost ones; None until a verdict is sound."""
        now = self._clock()
        with self._lock:
            if not self._sound(now):
                return None
            self._expire(now)
            return WorkerVerdict(
                alive=frozenset(self._heard), lost=dict(self._lost), lost_after=self._lost_after
            )

    def handled(self, names: Iterable[str]) -> None:
        """The scheduler committed what these workers' losses mean."""
        with self._lock:
            for name in names:
                self._lost.pop(name, None)
