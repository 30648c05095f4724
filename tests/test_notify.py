"""Wake-ups across processes on one machine reach every listener of a home."""

from __future__ import annotations

import contextlib
import os
import queue
import socket
import sys
import threading
from pathlib import Path

import pytest
from sqlalchemy import text

from tailrace.db import create_engine
from tailrace.notify import (
    RUNS_COMPONENT,
    PostgresListener,
    WakeupListener,
    Wakeups,
    _listening,
    _prefix,
    send_wakeup,
)
from tailrace.testing import wait_for

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


def _raw_send(home: Path, component: str, data: bytes) -> None:
    """A datagram to every listener, as any local process could send it."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        for name in _listening(_prefix(home, component)):
            sock.sendto(data, "\0" + name)


def test_a_malformed_datagram_is_ignored_and_the_listener_goes_on(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'unused.db'}")
    wakeups = Wakeups(tmp_path, engine)
    runs: queue.SimpleQueue[set[int]] = queue.SimpleQueue()
    wakeups.listen_for_runs(runs.put)
    try:
        for junk in (b"\xff\xfe\xfd", "²,³".encode(), b"", b"\x00" * 70000):
            with contextlib.suppress(OSError):  # the oversized one may be refused
                _raw_send(tmp_path, RUNS_COMPONENT, junk)
        wakeups.wake_runs([7, 8])
        assert runs.get(timeout=5) == {7, 8}
    finally:
        wakeups.close()
        engine.dispose()


@pytest.mark.skipif(os.geteuid() != 0, reason="sending as another user needs root")
def test_a_wakeup_from_another_local_user_is_dropped(tmp_path: Path) -> None:
    seen: queue.SimpleQueue[bytes] = queue.SimpleQueue()
    listener = WakeupListener(tmp_path, lambda: None, "scheduler", seen.put)
    # Its name, found once: /proc/net/unix is read in pieces, and a listing taken while
    # other sockets come and go (a loaded CI machine) can miss one.
    names = wait_for(lambda: _listening(_prefix(tmp_path, "scheduler")) or None, timeout=10)
    assert len(names) == 1
    address = "\0" + names[0]
    try:
        pid = os.fork()
        if pid == 0:  # the child: become nobody, then try to wake the scheduler
            code = 1
            try:
                os.setgid(65534)
                os.setuid(65534)
                with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                    sock.sendto(b"stranger", address)
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        # One socket, in order: had the stranger's datagram been taken, it would come first.
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(b"mine", address)
        assert seen.get(timeout=5) == b"mine"
    finally:
        listener.close()


def test_a_wakeup_through_a_database_that_went_away_is_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A wake-up is best effort: the component's poll finds the change. A caller (the
    triggerer's writer, a scheduler step) must not fail for a notice it could not send."""
    # Nothing listens on port 1: the connection is refused, as from a restarting server.
    engine = create_engine("postgresql+psycopg://postgres@127.0.0.1:1/postgres")
    try:
        Wakeups(tmp_path, engine).send("scheduler")
    finally:
        engine.dispose()
    assert "could not wake the scheduler through PostgreSQL" in caplog.text


@pytest.mark.parametrize("db_backend", [pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_postgres_listener_hears_every_notice_of_a_packet_and_stops_when_closed(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    heard: queue.Queue[str] = queue.Queue()
    libpq_url = database_url.replace("postgresql+psycopg://", "postgresql://")
    listener = PostgresListener(libpq_url, "tailrace_test_wake", heard.put)
    try:
        assert heard.get(timeout=10) == ""  # connected: "anything may have happened"
        engine = create_engine(database_url)
        try:
            # Three notices in one transaction reach the listener in one packet.
            with engine.begin() as conn:
                for payload in ("1", "2", "3"):
                    conn.execute(text("SELECT pg_notify('tailrace_test_wake', :p)"), {"p": payload})
        finally:
            engine.dispose()
        assert [heard.get(timeout=10) for _ in range(3)] == ["1", "2", "3"]
    finally:
        listener.close()
    # Closing woke it where it waited: it has ended, and said nothing of a lost connection.
    assert not listener._thread.is_alive()
    assert "lost its connection" not in caplog.text
