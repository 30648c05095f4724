"""A deadline for code running in a process's main thread (SIGALRM)."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def deadline(seconds: float | None, make_error: Callable[[], BaseException]) -> Iterator[None]:
    """Raise ``make_error()`` inside the block once ``seconds`` pass; ``None`` means none.

    Works for Python code only: a call blocked in C ignores it until it returns, which is
    why a worker's owner also kills a process that stays over its deadline.
    """
    if not seconds:
        yield
        return

    def on_alarm(signum: int, frame: object) -> None:
        raise make_error()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
