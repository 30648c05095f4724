"""A clock that moves only when a test moves it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class FakeClock:
    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta | float) -> datetime:
        self.now += delta if isinstance(delta, timedelta) else timedelta(seconds=delta)
        return self.now

    def set(self, moment: datetime) -> None:
        self.now = moment

    def sleep(self, seconds: float) -> None:
        """Sleep on this clock: it moves on by ``seconds`` at once."""
        self.advance(seconds)
