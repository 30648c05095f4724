"""Wake-ups across processes on one machine reach every listener of a home."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from tailrace.notify import WakeupListener, send_wakeup

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="abstract sockets")


def test_every_listener_of_a_component_is_woken_and_no_other(tmp_path: Path) -> None:
    woken = [threading.Event() for _ in range(3)]
    listeners = [
        WakeupListener(tmp_path, woken[0].set, "triggerer"),
        WakeupListener(tmp_path, woken[1].set, "triggerer"),
        WakeupListener(tmp_path, woken[2].set, "scheduler"),
    ]
    other_home = threading.Event()
    listeners.append(WakeupListener(tmp_path / "elsewhere", other_home.set, "triggerer"))
    try:
        assert send_wakeup(tmp_path, "triggerer")
        assert woken[0].wait(5) and woken[1].wait(5)
        assert not woken[2].is_set()
        assert not other_home.is_set()
        assert send_wakeup(tmp_path, "scheduler")
        assert woken[2].wait(5)
    finally:
        for listener in listeners:
            listener.close()


def test_nobody_listening_is_fine(tmp_path: Path) -> None:
    assert send_wakeup(tmp_path, "triggerer") is False
