"""Waiting on state another process changes (the database, a file), never on time alone."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(condition: Callable[[], T], timeout: float = 60.0, interval: float = 0.02) -> T:
    """Return ``condition()``'s first truthy value; fail with AssertionError after ``timeout``.

    For state held by another process, where no event can be awaited in this one.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{getattr(condition, '__name__', 'condition')} not met within {timeout}s"
            )
        time.sleep(interval)
