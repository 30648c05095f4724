"""A worker process's one watch thread gives every running try its turn (log lines,
heartbeats), whatever happens in another try's turn."""

from __future__ import annotations

import threading
from typing import Any, cast

from tailrace.execution._remote import _Watch


class _Unreadable:
    """A try whose turn fails: its log file cannot be read."""

    def __init__(self) -> None:
        self.turns = 0

    def turn(self, now: float) -> None:
        self.turns += 1
        raise PermissionError("the try's log file cannot be read")


class _Counting:
    def __init__(self, wanted: int) -> None:
        self.turns = 0
        self.wanted = wanted
        self.enough = threading.Event()

    def turn(self, now: float) -> None:
        self.turns += 1
        if self.turns >= self.wanted:
            self.enough.set()


def test_a_try_whose_turn_fails_does_not_stop_the_others_heartbeats() -> None:
    watch = _Watch()
    failing, healthy = _Unreadable(), _Counting(wanted=3)
    watch.add(cast(Any, failing))
    watch.add(cast(Any, healthy))
    try:
        # Three turns each (0.1 s apart): the failing try failed on every one of them.
        assert healthy.enough.wait(timeout=30)
        assert failing.turns >= 2
    finally:
        watch.discard(cast(Any, failing))
        watch.discard(cast(Any, healthy))
