"""Engines for the metadata database: SQLite (embedded) or PostgreSQL.

On SQLite every transaction starts with ``BEGIN IMMEDIATE`` unless it is declared
read-only; see docs/adr/0002-sqlite-concurrency.md for why.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
import weakref
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # not on Windows: writers there rely on SQLite's busy handler
    fcntl = None  # type: ignore[assignment]

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, Engine, make_url

from tailrace.db.errors import DatabaseError
from tailrace.serialization._json import dumps, loads

# busy_timeout goes first: switching to WAL itself needs a lock.
SQLITE_BUSY_TIMEOUT_MS = 30_000
SQLITE_PRAGMAS = (
    ("busy_timeout", str(SQLITE_BUSY_TIMEOUT_MS)),
    # Takes effect on a new database only: `db clean` can then give freed pages back.
    ("auto_vacuum", "INCREMENTAL"),
    ("journal_mode", "WAL"),
    ("synchronous", "NORMAL"),
    ("foreign_keys", "ON"),
)

# Execution option marking a connection whose transactions only read.
READ_ONLY_OPTION = "tailrace_read_only"
# Execution option: how often (seconds) a writer waiting for another process's write lock
# looks again, 5 ms unless set. A writer that yields between short transactions (`db
# clean`) looks more often, or the other process's writers, taking turns among
# themselves, would keep the lock from it.
WRITE_POLL_OPTION = "tailrace_write_poll"

_POSTGRES_SCHEMES = {"postgres", "postgresql", "postgresql+psycopg"}

# A pooled PostgreSQL connection idle at least this long is pinged before it is handed
# out (a server restarted meanwhile would have dropped it); one used more recently is
# taken as alive, as the statement it last ran showed (ADR 0053).
PING_AFTER_IDLE_SECONDS = 1.0
# Where a pooled connection's record keeps when it went back to the pool.
_CHECKED_IN = "tailrace_checked_in"


def sqlite_url(path: str | Path) -> str:
    return f"sqlite:///{Path(path).expanduser()}"


def normalize_url(url: str | URL) -> URL:
    """Parse ``url``; bare ``postgres://``/``postgresql://`` URLs get the psycopg 3 driver."""
    parsed = make_url(url) if isinstance(url, str) else url
    if parsed.drivername in _POSTGRES_SCHEMES:
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def create_engine(url: str | URL | None = None, **engine_kwargs: Any) -> Engine:
    """An engine for ``url``, or for the configured ``database_url`` when it is None."""
    if url is None:
        from tailrace.config import load_settings

        url = load_settings().database_url
    parsed = normalize_url(url)
    backend = parsed.get_backend_name()
    # JSON columns (conf, trigger kwargs, checkpoints) use the same codec as payloads, so
    # whatever a trigger or task may pass (datetimes among it) stores without surprise.
    engine_kwargs.setdefault("json_serializer", dumps)
    engine_kwargs.setdefault("json_deserializer", loads)
    if backend == "sqlite":
        return _create_sqlite_engine(parsed, engine_kwargs)
    if backend == "postgresql":
        engine = sa.create_engine(parsed, **engine_kwargs)
        if not engine_kwargs.get("pool_pre_ping"):
            _ping_when_idle(engine)
        return engine
    raise DatabaseError(
        f"unsupported database {parsed.render_as_string(hide_password=True)}: "
        "Tailrace runs on SQLite (sqlite:///path) or PostgreSQL (postgresql://...)"
    )


def read_only_engine(engine: Engine) -> Engine:
    """``engine`` with every transaction declared read-only (shares its pool)."""
    options: dict[str, Any] = {READ_ONLY_OPTION: True}
    if is_postgres(engine):
        options["postgresql_readonly"] = True
    return engine.execution_options(**options)


def is_postgres(bind: Engine | Connection) -> bool:
    return bind.dialect.name == "postgresql"


def forget_info(conn: Connection, key: str) -> None:
    """Drop ``key`` from the connection's ``info``, unless the connection was invalidated
    (its database went away mid-transaction): its info went with its DBAPI connection,
    and asking for it would try to reconnect and raise ``PendingRollbackError`` — over
    the error that invalidated it, or inside a rollback that then never completes."""
    if not conn.invalidated:
        conn.info.pop(key, None)


def _ping_when_idle(engine: Engine) -> None:
    """SQLAlchemy's ``pool_pre_ping`` for a connection idle ``PING_AFTER_IDLE_SECONDS``
    only: a busy component would otherwise pay a round trip for every transaction. A
    ping that finds the connection dropped has the pool replace it (SQLAlchemy's
    ``DisconnectionError``, as its own pre-ping does)."""
    dialect = engine.dialect

    def checked_in(_dbapi_connection: object, record: Any) -> None:
        record.info[_CHECKED_IN] = time.monotonic()

    def checkout(dbapi_connection: Any, record: Any, _proxy: object) -> None:
        idle_since = record.info.get(_CHECKED_IN)
        if idle_since is None or time.monotonic() - idle_since < PING_AFTER_IDLE_SECONDS:
            return
        try:
            dialect.do_ping(dbapi_connection)
        except dialect.loaded_dbapi.Error as exc:
            if dialect.is_disconnect(exc, dbapi_connection, None):
                raise sa.exc.DisconnectionError(str(exc)) from exc
            raise

    event.listen(engine, "checkin", checked_in)
    event.listen(engine, "checkout", checkout)


def is_sqlite(bind: Engine | Connection) -> bool:
    return bind.dialect.name == "sqlite"


def _create_sqlite_engine(url: URL, engine_kwargs: dict[str, Any]) -> Engine:
    database = url.database or ""
    if database and database != ":memory:" and not database.startswith("file:"):
        path = Path(database).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        _create_private(path)
        url = url.set(database=str(path))
    connect_args = engine_kwargs.setdefault("connect_args", {})
    # The driver's own busy handler, in force before the PRAGMAs run.
    connect_args.setdefault("timeout", SQLITE_BUSY_TIMEOUT_MS / 1000)
    engine = sa.create_engine(url, **engine_kwargs)
    event.listen(engine, "connect", _on_sqlite_connect)
    event.listen(engine, "begin", _on_sqlite_begin)
    event.listen(engine, "commit", _release_write_gate)
    event.listen(engine, "rollback", _release_write_gate)
    return engine


def _create_private(path: Path) -> None:
    """Create the database file readable by its owner only: it holds users' password
    hashes and connections. SQLite gives its -wal and -shm files the same mode; an empty
    file is an empty database to it."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


class FairLock:
    """A first-come, first-served lock: a thread that releases it and asks again queues
    behind the threads already waiting (``threading.Lock`` would let it cut in)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._next_ticket = 0
        self._serving = 0
        self._abandoned: set[int] = set()  # tickets whose holders stopped waiting

    def acquire(self, timeout: float) -> bool:
        with self._cond:
            ticket = self._next_ticket
            self._next_ticket += 1
            if self._cond.wait_for(lambda: self._serving == ticket, timeout):
                return True
            # Gave up: hand our turn on when it comes, so nobody waits behind a ghost.
            self._abandoned.add(ticket)
            self._skip_abandoned()
            return False

    def release(self) -> None:
        with self._cond:
            self._serving += 1
            self._skip_abandoned()

    def _skip_abandoned(self) -> None:
        """Pass over tickets nobody waits for any more, then wake the waiters."""
        while self._serving in self._abandoned:
            self._abandoned.discard(self._serving)
            self._serving += 1
        self._cond.notify_all()


class WriteGate:
    """Turns for the writers of one SQLite file (ADR 0002).

    SQLite's busy handler polls with sleeps of up to 100 ms, so a writer that commits and
    begins again at once (a triggerer persisting a flood of events) starves the others
    for seconds. Writers here take turns instead: first come, first served among the
    threads of this process, then across processes through two advisory locks, each
    polled every 0.5 to 5 ms: ``<database>-writer.lock`` is the turn itself, and
    ``<database>-writer.queue`` the place next in line, held while waiting for the turn.
    A process that ends its turn and wants another at once must first take the place in
    line, which the process waiting holds until the turn is its own: two processes
    alternate instead of the quicker one taking every turn (a scheduler's passes waited
    up to 180 ms behind a triggerer's back-to-back batches). SQLite's own lock still
    guards the data; a writer that gives up waiting proceeds to it.
    """

    def __init__(self, path: str | None) -> None:
        self._turns = FairLock()
        on_disk = bool(path) and fcntl is not None
        self._lock_path = f"{path}-writer.lock" if on_disk else None
        self._queue_path = f"{path}-writer.queue" if on_disk else None
        self._fd: int | None = None

    def acquire(self, timeout: float, poll: float = 0.005) -> bool:
        """Take this process's turn, then the place in line and the file lock, each
        polled up to every ``poll`` s."""
        deadline = time.monotonic() + timeout
        if not self._turns.acquire(timeout):
            return False
        if self._lock_path is None or self._queue_path is None:
            return True
        queue = _flock(self._queue_path, deadline, poll)
        if queue is None:
            self._turns.release()
            return False
        try:
            self._fd = _flock(self._lock_path, deadline, poll)
        finally:
            os.close(queue)  # the next in line may queue now
        if self._fd is None:
            self._turns.release()
            return False
        return True

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing drops the advisory lock
        self._turns.release()


def _flock(path: str, deadline: float, poll: float) -> int | None:
    """An open descriptor holding an exclusive advisory lock on ``path`` (closing it
    drops the lock), or None if another process held it past ``deadline``."""
    assert fcntl is not None
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    delay = 0.0005
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
            time.sleep(min(delay, poll))
            delay = min(delay * 2, 0.005)
        else:
            return fd


_WRITE_GATES: dict[str, WriteGate] = {}
_GATES_LOCK = threading.Lock()
# The gate each connection holds, by connection rather than in its ``info``: a connection
# invalidated mid-transaction (its database went away) cannot reach its ``info`` in the
# rollback that follows, and its turn must still be handed on.
_HELD: weakref.WeakKeyDictionary[Connection, WriteGate] = weakref.WeakKeyDictionary()


def _write_gate(conn: Connection) -> WriteGate:
    database = conn.engine.url.database or ""
    on_disk = bool(database) and database != ":memory:" and not database.startswith("file:")
    key = database if on_disk else f"memory:{id(conn.engine)}"
    with _GATES_LOCK:
        gate = _WRITE_GATES.get(key)
        if gate is None:
            gate = _WRITE_GATES[key] = WriteGate(database if on_disk else None)
        return gate


def _release_write_gate(conn: Connection) -> None:
    with _GATES_LOCK:
        gate = _HELD.pop(conn, None)
    if gate is not None:
        gate.release()


def _on_sqlite_connect(dbapi_connection: sqlite3.Connection, _record: object) -> None:
    # Take BEGIN away from the driver (which skips it before SELECT and DDL) so that
    # _on_sqlite_begin decides how every transaction starts.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        for name, value in SQLITE_PRAGMAS:
            cursor.execute(f"PRAGMA {name} = {value}")
    finally:
        cursor.close()


def _on_sqlite_begin(conn: Connection) -> None:
    if conn.get_execution_options().get(READ_ONLY_OPTION):
        conn.exec_driver_sql("BEGIN")
        return
    gate = _write_gate(conn)
    # Past the busy timeout, go on regardless: SQLite's own lock still protects the data.
    poll = conn.get_execution_options().get(WRITE_POLL_OPTION, 0.005)
    if gate.acquire(timeout=SQLITE_BUSY_TIMEOUT_MS / 1000, poll=poll):
        with _GATES_LOCK:
            _HELD[conn] = gate
    try:
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    except BaseException:
        _release_write_gate(conn)
        raise
