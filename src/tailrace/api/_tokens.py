"""Tokens recently found valid, so a burst of reads costs one lookup per token a second
rather than one per request.

A token logged out through this process is forgotten here at once; another API process
(distributed mode runs several) stops accepting it within ``TTL_SECONDS``. Expiry is
checked on every hit. Only tokens the database confirmed are kept, so a flood of made-up
tokens cannot grow the cache, and it is bounded anyway.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from tailrace.users import AuthenticatedUser

TTL_SECONDS = 2.0
MAX_ENTRIES = 10_000


@dataclass(frozen=True, slots=True)
class _Entry:
    user: AuthenticatedUser
    expires_at: datetime | None
    checked_at: float


class TokenCache:
    def __init__(
        self,
        ttl: float = TTL_SECONDS,
        max_entries: int = MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ttl = ttl
        self._clock = clock
        self._max = max_entries
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    def get(self, token: str, now: datetime) -> AuthenticatedUser | None:
        entry = self._entries.get(token)
        if entry is None:
            return None
        fresh = self._clock() - entry.checked_at < self._ttl
        if not fresh or (entry.expires_at is not None and entry.expires_at <= now):
            self.forget(token)
            return None
        return entry.user

    def put(self, token: str, user: AuthenticatedUser, expires_at: datetime | None) -> None:
        with self._lock:
            if len(self._entries) >= self._max:
                self._entries.clear()
            self._entries[token] = _Entry(user, expires_at, self._clock())

    def forget(self, token: str) -> None:
        with self._lock:
            self._entries.pop(token, None)
