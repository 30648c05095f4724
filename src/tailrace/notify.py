"""Cross-process wake-ups on one machine: "something changed, look now".

The scheduler listens on an abstract Unix datagram socket named after TAILRACE_HOME, so
a CLI command or API call that creates a run wakes it at once instead of waiting for the
next safety-net poll. Delivery is best effort: the poll still catches anything missed.
(PostgreSQL deployments add LISTEN/NOTIFY for wake-ups across machines.)
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import socket
import sys
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)


def _address(home: str | Path, component: str) -> str:
    digest = hashlib.sha1(str(Path(home).resolve()).encode()).hexdigest()[:16]
    return f"\0tailrace-{component}-{digest}"


def send_wakeup(home: str | Path, component: str = "scheduler") -> bool:
    if not sys.platform.startswith("linux"):
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        try:
            sock.sendto(b"wake", _address(home, component))
        except OSError:
            return False  # nobody listening: fine
    return True


class WakeupListener:
    def __init__(self, home: str | Path, on_wake: Callable[[], None], component: str) -> None:
        self._on_wake = on_wake
        self._sock: socket.socket | None = None
        if not sys.platform.startswith("linux"):
            return
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.bind(_address(home, component))
        except OSError:
            log.warning("another %s already listens for wake-ups in %s", component, home)
            sock.close()
            return
        self._sock = sock
        threading.Thread(target=self._listen, name=f"{component}-wakeups", daemon=True).start()

    def _listen(self) -> None:
        assert self._sock is not None
        while True:
            try:
                self._sock.recv(64)
            except OSError:
                return
            self._on_wake()

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            self._sock.close()
