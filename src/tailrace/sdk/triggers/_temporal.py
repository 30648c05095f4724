"""Triggers that wait for a moment in time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from tailrace.sdk import _clock as clock
from tailrace.sdk._types import as_timedelta
from tailrace.sdk.triggers._base import BaseTrigger, TaskSuccessEvent, TriggerEvent

# Sleep in chunks so that a wall-clock jump (NTP step, suspended host) is noticed within
# this long; asyncio.sleep itself runs on the monotonic clock.
MAX_SLEEP_SECONDS: Final = 3600.0


def utcnow() -> datetime:
    """The current wall-clock time, aware UTC: ``tailrace.clock``'s (a test's virtual one)."""
    return clock.utcnow()


def _as_moment(moment: datetime | str) -> datetime:
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    if not isinstance(moment, datetime):
        raise TypeError(f"moment must be a datetime or an ISO-8601 string, got {moment!r}")
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


class DateTimeTrigger(BaseTrigger):
    """Fires once ``moment`` has come (immediately if it has passed).

    ``moment`` is a datetime (naive means UTC) or its ISO-8601 string. The event's payload
    is ``moment`` as an ISO-8601 string; with ``end_from_trigger=True`` the trigger yields
    a :class:`TaskSuccessEvent` instead, ending the task without a worker.
    """

    def __init__(self, moment: datetime | str, end_from_trigger: bool = False) -> None:
        super().__init__()
        self.moment = _as_moment(moment)
        self.end_from_trigger = end_from_trigger

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return "tailrace.sdk.triggers.DateTimeTrigger", {
            "moment": self.moment.isoformat(),
            "end_from_trigger": self.end_from_trigger,
        }

    async def run(self) -> AsyncIterator[TriggerEvent]:
        self.log.info("sleeping until %s", self.moment.isoformat())
        # Re-read the wall clock after every chunk: the monotonic sleep corrects itself
        # against it, so neither a long wait nor a clock jump makes the trigger fire late.
        while (remaining := (self.moment - utcnow()).total_seconds()) > 0:
            await asyncio.sleep(min(remaining, MAX_SLEEP_SECONDS))
        self.log.info("reached %s", self.moment.isoformat())
        if self.end_from_trigger:
            yield TaskSuccessEvent()
        else:
            yield TriggerEvent(self.moment.isoformat())


class TimeDeltaTrigger(DateTimeTrigger):
    """Fires ``delta`` (a timedelta or seconds) after the trigger is created.

    It is a :class:`DateTimeTrigger` for ``now + delta`` and serializes as one, so the wait
    does not start over when the trigger is re-created elsewhere.
    """

    def __init__(self, delta: timedelta | float, end_from_trigger: bool = False) -> None:
        span = as_timedelta(delta)
        if span is None:
            raise TypeError("delta must be a datetime.timedelta or a number of seconds")
        super().__init__(moment=utcnow() + span, end_from_trigger=end_from_trigger)
        self.delta = span
