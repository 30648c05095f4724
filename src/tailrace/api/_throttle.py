"""Failed logins per client address, in a sliding window: past the limit, 429 until the
oldest failure in the window ages out. Per api-server process (each counts its own).

Memory is bounded: past ``max_clients`` addresses, those whose failures have aged out
are forgotten, then the longest-known ones (an attacker with that many addresses is not
held back by a per-address limit anyway)."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable


class LoginThrottle:
    def __init__(
        self,
        attempts: int,
        window: float,
        clock: Callable[[], float] = time.monotonic,
        max_clients: int = 10_000,
    ) -> None:
        self.attempts = attempts
        self.window = window
        self.max_clients = max_clients
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
            if client not in self._failures and len(self._failures) >= self.max_clients:
                self._make_room(now)
            failures = self._failures.setdefault(client, deque())
            failures.append(now)
            while len(failures) > self.attempts:
                failures.popleft()

    def _expire(self, failures: deque[float], now: float) -> None:
        while failures and failures[0] <= now - self.window:
            failures.popleft()

    def _make_room(self, now: float) -> None:
        for client in list(self._failures):
            self._expire(self._failures[client], now)
            if not self._failures[client]:
                del self._failures[client]
        # Still full: forget the addresses known longest (dicts keep insertion order).
        for client in list(self._failures)[: len(self._failures) - self.max_clients // 2]:
            del self._failures[client]
