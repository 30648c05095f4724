"""The one clock (``tailrace.clock`` is its public face): every component asks it for
"now", and tests hand in their own. It lives in the SDK because task code, sensors and
triggers ask it too, and the SDK imports nothing of the core.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

Clock = Callable[[], datetime]
Sleeper = Callable[[float], None]


def system_now() -> datetime:
    return datetime.now(UTC)


_now: Clock = system_now
_sleep: Sleeper = time.sleep


def utcnow() -> datetime:
    """The installed clock's "now" (aware UTC): the system's unless a test installed one."""
    return _now()


def sleep(seconds: float) -> None:
    """Block for ``seconds`` of the installed clock (a poke-mode sensor between pokes)."""
    _sleep(seconds)


@contextlib.contextmanager
def installed(now: Clock, sleep: Sleeper) -> Iterator[None]:
    """Make ``now`` and ``sleep`` the process's clock for the block (one at a time)."""
    global _now, _sleep
    if _now is not system_now:
        raise RuntimeError("another clock is installed already; install one at a time")
    _now, _sleep = now, sleep
    try:
        yield
    finally:
        _now, _sleep = system_now, time.sleep
