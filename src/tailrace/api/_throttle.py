"""Failed logins per client address, in a sliding window: past the limit, 429 until the
oldest failure in the window ages out. Per api-server process (each counts its own)."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

# Stale addresses are swept once this many are held, so memory stays bounded.
_SWEEP_AT = 10_000


class LoginThrottle:
    def __init__(
        self, attempts: int, window: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.attempts = attempts
        self.window = window
        self._clock = clock
        self._lock = threading.Lock()
        self._failures: dict[str, deque[float]] = {}

    def retry_after(self, client: str) -> float | None:
        """Seconds until ``client`` may try again, or None if it may now."""
        now = self._clock()
        with self._lock:
            failures = self._failures.get(client)
            if failures is None:
                return None
            self._expire(failures, now)
            if len(failures) < self.attempts:
                return None
            return failures[0] + self.window - now

    def failed(self, client: str) -> None:
        now = self._clock()
        with self._lock:
            if len(self._failures) >= _SWEEP_AT:
                self._sweep(now)
            failures = self._failures.setdefault(client, deque())
            failures.append(now)
            while len(failures) > self.attempts:
                failures.popleft()

    def _expire(self, failures: deque[float], now: float) -> None:
        while failures and failures[0] <= now - self.window:
            failures.popleft()

    def _sweep(self, now: float) -> None:
        for client in list(self._failures):
            self._expire(self._failures[client], now)
            if not self._failures[client]:
                del self._failures[client]
