"""Cross-process wake-ups on one machine: "something changed, look now".

Each listening component binds an abstract Unix datagram socket named after TAILRACE_HOME,
the component and its process; a sender finds every such socket in /proc/net/unix and
wakes them all (two triggerers on one machine both hear it). So a CLI command that
creates a run wakes the scheduler at once instead of waiting for the next safety-net
poll. Delivery is best effort: the poll still catches anything missed.
On PostgreSQL, ``Wakeups`` adds LISTEN/NOTIFY, which reaches components on other machines.

An abstract socket has no file permissions: any local user can send to it. So a listener
reads each datagram's sender credentials (``SO_PASSCRED``: the kernel fills them in, a
sender cannot forge them) and drops what does not come from its own user (or root);
whatever a message holds, a malformed one is ignored and the listener goes on.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import logging
import os
import selectors
import socket
import struct
import sys
import threading
from collections.abc import Callable, Collection
from pathlib import Path

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError

log = logging.getLogger(__name__)


_listeners = itertools.count()


def _prefix(home: str | Path, component: str) -> str:
    digest = hashlib.sha1(str(Path(home).resolve()).encode()).hexdigest()[:16]
    return f"tailrace-{component}-{digest}-"


def _listening(prefix: str) -> list[str]:
    """Abstract socket names starting with ``prefix``, from /proc/net/unix."""
    try:
        lines = Path("/proc/net/unix").read_text().splitlines()[1:]
    except OSError:
        return []
    names = {line.split()[-1] for line in lines if line.split()[-1:]}
    return sorted(name[1:] for name in names if name.startswith("@" + prefix))


def send_wakeup(home: str | Path, component: str = "scheduler", message: bytes = b"wake") -> bool:
    """Wake every ``component`` listening for this home on this machine."""
    if not sys.platform.startswith("linux"):
        return False
    woken = False
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        for name in _listening(_prefix(home, component)):
            try:
                sock.sendto(message, "\0" + name)
                woken = True
            except OSError:
                continue  # it went away meanwhile: fine
    return woken


# struct ucred: pid, uid, gid.
_UCRED = struct.Struct("iII")
_MAX_DATAGRAM = 65536


def _sender_uid(ancdata: list[tuple[int, int, bytes]]) -> int | None:
    for level, kind, data in ancdata:
        if (level, kind) == (socket.SOL_SOCKET, socket.SCM_CREDENTIALS) and len(
            data
        ) >= _UCRED.size:
            return int(_UCRED.unpack_from(data)[1])
    return None


class WakeupListener:
    def __init__(
        self,
        home: str | Path,
        on_wake: Callable[[], None],
        component: str,
        on_message: Callable[[bytes], None] | None = None,
    ) -> None:
        self._on_message = on_message or (lambda _: on_wake())
        self._sock: socket.socket | None = None
        if not sys.platform.startswith("linux"):
            return
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        name = f"{_prefix(home, component)}{os.getpid()}-{next(_listeners)}"
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            sock.bind("\0" + name)
        except OSError:
            log.warning("could not listen for %s wake-ups in %s", component, home)
            sock.close()
            return
        self._sock = sock
        threading.Thread(target=self._listen, name=f"{component}-wakeups", daemon=True).start()

    def _listen(self) -> None:
        assert self._sock is not None
        allowed = {os.geteuid(), 0}
        ancillary = socket.CMSG_SPACE(_UCRED.size)
        while True:
            try:
                message, ancdata, _, _ = self._sock.recvmsg(_MAX_DATAGRAM, ancillary)
            except OSError:
                return
            if _sender_uid(ancdata) not in allowed:
                continue  # another local user: not ours to act on
            try:
                self._on_message(message)
            except Exception:
                log.warning("ignored a malformed wake-up (%d bytes)", len(message), exc_info=True)

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            self._sock.close()


class PostgresListener:
    """LISTEN on a channel with a dedicated connection; wake-ups across machines."""

    def __init__(self, url: str, channel: str, on_notify: Callable[[str], None]) -> None:
        self._url = url
        self._channel = channel
        self._on_notify = on_notify
        self._stop = threading.Event()
        # `close` writes to it: the thread, waiting on its connection's socket and this
        # one, stops at once (it used to wake once a second to look, and so make every
        # component's shutdown wait up to a second).
        self._woken, self._wake = socket.socketpair()
        self._thread = threading.Thread(target=self._listen, name=f"{channel}-listen", daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        import psycopg

        while not self._stop.is_set():
            try:
                with (
                    psycopg.connect(self._url, autocommit=True) as conn,
                    selectors.DefaultSelector() as readable,  # not select(): fds past 1,024
                ):
                    conn.execute(f"LISTEN {self._channel}")
                    readable.register(conn.fileno(), selectors.EVENT_READ)
                    readable.register(self._woken, selectors.EVENT_READ)
                    # Anything may have happened while this connection was away.
                    self._on_notify("")
                    while not self._stop.is_set():
                        # What has arrived (a packet may hold several), then wait for more.
                        for notice in conn.notifies(timeout=0):
                            self._on_notify(notice.payload)
                        readable.select()
            except Exception:  # the database restarted: reconnect, the poll covers the gap
                if self._stop.is_set():
                    return
                log.warning("LISTEN %s lost its connection; reconnecting", self._channel)
                self._stop.wait(1.0)

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._wake.send(b"\0")
        self._thread.join(timeout=5)
        self._woken.close()
        self._wake.close()


def channel_for(component: str) -> str:
    return f"tailrace_{component}"


# Runs whose task instances changed outside the schedulers (a remote worker's report).
RUNS_CHANNEL = "tailrace_runs"
RUNS_COMPONENT = "scheduler-runs"
# NOTIFY payloads are limited to 8,000 bytes.
_PAYLOAD_IDS = 500


def _run_ids(payload: str) -> set[int]:
    return {
        int(part)
        for part in payload.split(",")
        if part.strip().isascii() and part.strip().isdigit()
    }


def _payloads(run_ids: Collection[int]) -> list[str]:
    ids = sorted(run_ids)
    return [",".join(map(str, ids[i : i + _PAYLOAD_IDS])) for i in range(0, len(ids), _PAYLOAD_IDS)]


class Wakeups:
    """Wake a component now: on this machine by socket, anywhere by PostgreSQL NOTIFY."""

    def __init__(self, home: str | Path, engine: Engine) -> None:
        self.home = home
        self.engine = engine
        self._closers: list[Callable[[], None]] = []

    def send(self, component: str) -> None:
        """Best effort, like every wake-up: never raises. A database that went away
        cannot carry the notice, and the component's poll finds the change."""
        send_wakeup(self.home, component)
        if self.engine.dialect.name == "postgresql":
            try:
                with self.engine.connect() as conn:
                    conn.execute(
                        text("SELECT pg_notify(:channel, '')"), {"channel": channel_for(component)}
                    )
                    conn.commit()
            except DBAPIError as exc:
                log.warning(
                    "could not wake the %s through PostgreSQL (%s); its poll finds the change",
                    component,
                    exc.orig,
                )

    def listen(self, component: str, on_wake: Callable[[], None]) -> None:
        self._closers.append(WakeupListener(self.home, on_wake, component).close)
        if self.engine.dialect.name == "postgresql":
            listener = PostgresListener(self._url, channel_for(component), lambda _: on_wake())
            self._closers.append(listener.close)

    def notify_runs(self, conn: Connection, run_ids: Collection[int]) -> None:
        """Tell the schedulers on other machines these runs changed (a remote worker's
        report): PostgreSQL delivers the notice when ``conn``'s transaction commits."""
        if self.engine.dialect.name == "postgresql":
            for payload in _payloads(run_ids):
                conn.execute(
                    text("SELECT pg_notify(:channel, :payload)"),
                    {"channel": RUNS_CHANNEL, "payload": payload},
                )

    def wake_runs(self, run_ids: Collection[int]) -> None:
        """Tell the schedulers on this machine, once the change is committed."""
        for payload in _payloads(run_ids):
            send_wakeup(self.home, RUNS_COMPONENT, payload.encode())

    def listen_for_runs(self, on_runs: Callable[[set[int]], None]) -> None:
        def on_notify(payload: str) -> None:
            if ids := _run_ids(payload):
                on_runs(ids)

        listener = WakeupListener(
            self.home,
            lambda: None,
            RUNS_COMPONENT,
            lambda data: on_notify(data.decode("ascii", errors="replace")),
        )
        self._closers.append(listener.close)
        if self.engine.dialect.name == "postgresql":
            self._closers.append(PostgresListener(self._url, RUNS_CHANNEL, on_notify).close)

    @property
    def _url(self) -> str:
        return self.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)

    def close(self) -> None:
        for close in self._closers:
            close()
        self._closers.clear()
