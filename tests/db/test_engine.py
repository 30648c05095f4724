from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, InternalError

from tailrace.db import (
    DatabaseError,
    create_engine,
    is_postgres,
    normalize_url,
    read_only_engine,
    unreachable,
)
from tailrace.db import engine as engine_module

only_sqlite = pytest.mark.parametrize("db_backend", ["sqlite"])
only_postgres = pytest.mark.parametrize(
    "db_backend", [pytest.param("postgres", marks=pytest.mark.postgres)]
)


@only_sqlite
def test_every_sqlite_connection_gets_the_pragmas(engine: Engine) -> None:
    # Two DBAPI connections checked out at once: the pool must have set up both.
    connections = [engine.raw_connection(), engine.raw_connection()]
    try:
        for connection in connections:
            cursor = connection.cursor()

            def pragma(name: str) -> object:
                cursor.execute(f"PRAGMA {name}")  # noqa: B023 - used right away
                return cursor.fetchone()[0]  # noqa: B023

            assert pragma("journal_mode") == "wal"
            assert pragma("busy_timeout") == 30_000
            assert pragma("foreign_keys") == 1
            assert pragma("synchronous") == 1  # NORMAL
            assert pragma("auto_vacuum") == 2  # INCREMENTAL: db clean frees space
            cursor.close()
    finally:
        for connection in connections:
            connection.close()


def sqlite_path(engine: Engine) -> str:
    assert engine.url.database
    return engine.url.database


def try_to_take_the_write_lock(path: str) -> bool:
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        assert "locked" in str(exc)
        return False
    else:
        other.execute("ROLLBACK")
        return True
    finally:
        other.close()


@only_sqlite
def test_sqlite_transactions_take_the_write_lock_when_they_begin(engine: Engine) -> None:
    with engine.connect() as connection:
        connection.execute(text("SELECT 1 FROM dag"))  # a read, yet the lock is held

        assert not try_to_take_the_write_lock(sqlite_path(engine))
    assert try_to_take_the_write_lock(sqlite_path(engine))


@only_sqlite
def test_read_only_sqlite_transactions_leave_the_write_lock_alone(engine: Engine) -> None:
    with read_only_engine(engine).connect() as connection:
        connection.execute(text("SELECT 1 FROM dag"))

        assert try_to_take_the_write_lock(sqlite_path(engine))


@only_sqlite
def test_sqlite_rolls_back_ddl_and_savepoints(engine: Engine) -> None:
    with engine.connect() as connection:
        connection.execute(text("CREATE TABLE scratch (id INTEGER)"))
        with connection.begin_nested() as savepoint:
            connection.execute(text("INSERT INTO scratch VALUES (1)"))
            savepoint.rollback()
        connection.execute(text("INSERT INTO scratch VALUES (2)"))
        assert connection.execute(text("SELECT id FROM scratch")).scalars().all() == [2]
        connection.rollback()
        assert (
            connection.execute(text("SELECT name FROM sqlite_master WHERE name = 'scratch'")).all()
            == []
        )


@only_sqlite
def test_sqlite_enforces_foreign_keys(engine: Engine) -> None:
    with engine.connect() as connection, pytest.raises(Exception, match="FOREIGN KEY"):
        connection.execute(
            text(
                "INSERT INTO api_token (user_id, token_hash, created_at)"
                " VALUES (42, 'h', '2024-01-01')"
            )
        )


@only_postgres
def test_read_only_postgres_transactions_refuse_writes(engine: Engine) -> None:
    with (
        read_only_engine(engine).connect() as connection,
        pytest.raises(InternalError, match="read-only"),
    ):
        connection.execute(text("INSERT INTO connection (conn_id, uri) VALUES ('c', 'x://')"))


def _drop_pooled_connection(engine: Engine) -> int:
    """End the server side of the pool's one idle connection, as a restart would; its pid."""
    with engine.connect() as conn:
        pid = conn.scalar(text("SELECT pg_backend_pid()"))
    killer = create_engine(engine.url)
    try:
        with killer.connect() as other:
            assert other.scalar(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    finally:
        killer.dispose()
    return int(pid)


@only_postgres
def test_a_pooled_connection_dropped_while_idle_is_pinged_and_replaced_unseen(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    dropped = _drop_pooled_connection(engine)
    monkeypatch.setattr(engine_module, "PING_AFTER_IDLE_SECONDS", 0.0)  # idle long enough
    with engine.connect() as conn:
        assert conn.scalar(text("SELECT pg_backend_pid()")) != dropped


@only_postgres
def test_a_connection_used_moments_ago_is_not_pinged_and_its_drop_is_one_unreachable_error(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A busy component pays no round trip per transaction: the first statement on a
    # dropped connection fails as "unreachable" (a component logs one line and retries),
    # and the next transaction gets a new connection.
    monkeypatch.setattr(engine_module, "PING_AFTER_IDLE_SECONDS", 3600.0)
    dropped = _drop_pooled_connection(engine)
    with pytest.raises(DBAPIError) as failed, engine.connect() as conn:
        conn.scalar(text("SELECT 1"))
    assert failed.value.connection_invalidated and unreachable(failed.value) is not None
    with engine.connect() as conn:
        assert conn.scalar(text("SELECT pg_backend_pid()")) != dropped


def test_is_postgres(engine: Engine, db_backend: str) -> None:
    assert is_postgres(engine) is (db_backend == "postgres")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgres://u:p@h:5433/db", "postgresql+psycopg://u:***@h:5433/db"),
        ("postgresql://h/db", "postgresql+psycopg://h/db"),
        ("postgresql+psycopg://h/db", "postgresql+psycopg://h/db"),
        ("sqlite:////tmp/x.db", "sqlite:////tmp/x.db"),
    ],
)
def test_postgres_urls_use_psycopg_3(url: str, expected: str) -> None:
    assert str(normalize_url(url)) == expected


def test_unsupported_databases_are_refused_by_name() -> None:
    with pytest.raises(DatabaseError, match=r"unsupported database mysql://u:\*\*\*@h/db"):
        create_engine("mysql://u:secret@h/db")


def test_the_default_database_lives_in_tailrace_home(tailrace_home: Path) -> None:
    engine = create_engine()
    try:
        assert engine.url.database == str(tailrace_home / "tailrace.db")
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        assert (tailrace_home / "tailrace.db").is_file()
    finally:
        engine.dispose()


def test_sqlite_parent_directories_are_created(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path}/a/b/tailrace.db")
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        assert (tmp_path / "a" / "b" / "tailrace.db").is_file()
    finally:
        engine.dispose()


def test_the_write_gate_serves_writers_in_arrival_order_and_skips_those_who_left() -> None:
    from tailrace.db.engine import FairLock
    from tailrace.testing import wait_for

    lock = FairLock()
    assert lock.acquire(timeout=1)
    order: list[str] = []

    def writer(name: str) -> None:
        assert lock.acquire(timeout=30)
        order.append(name)
        lock.release()

    first = threading.Thread(target=writer, args=("first",))
    first.start()
    wait_for(lambda: lock._next_ticket == 2)  # "first" has taken its ticket
    # A writer that gives up waiting must not leave a gap the others wait behind.
    assert not lock.acquire(timeout=0.01)
    second = threading.Thread(target=writer, args=("second",))
    second.start()
    wait_for(lambda: lock._next_ticket == 4)
    lock.release()
    first.join(timeout=30)
    second.join(timeout=30)
    assert order == ["first", "second"]
    assert lock.acquire(timeout=1)  # free again


def test_a_process_that_ends_its_write_turn_queues_behind_the_one_waiting(tmp_path: Path) -> None:
    """Two gates on one file contend as two processes do (an advisory lock belongs to
    its open file): the one that releases and asks again at once, as a triggerer writing
    batch after batch does, must let the waiting one go first."""
    import os
    import time

    from tailrace.db.engine import WriteGate, _flock
    from tailrace.testing import wait_for

    path = str(tmp_path / "tailrace.db")
    triggerer, scheduler = WriteGate(path), WriteGate(path)
    assert triggerer.acquire(timeout=1)
    turns: list[str] = []

    def waiting_writer() -> None:
        assert scheduler.acquire(timeout=30)
        turns.append("scheduler")
        scheduler.release()

    def in_line() -> bool:  # the waiting writer holds the place next in line
        probe = _flock(f"{path}-writer.queue", deadline=time.monotonic(), poll=0.001)
        if probe is not None:
            os.close(probe)  # free: drop the probe's lock
        return probe is None

    thread = threading.Thread(target=waiting_writer)
    thread.start()
    wait_for(in_line)
    triggerer.release()
    assert triggerer.acquire(timeout=30)
    turns.append("triggerer")
    triggerer.release()
    thread.join(timeout=30)
    assert turns == ["scheduler", "triggerer"]


def test_a_writer_that_gives_up_waiting_leaves_the_line(tmp_path: Path) -> None:
    from tailrace.db.engine import WriteGate

    path = str(tmp_path / "tailrace.db")
    holder, impatient, later = WriteGate(path), WriteGate(path), WriteGate(path)
    assert holder.acquire(timeout=1)
    assert not impatient.acquire(timeout=0.05)
    holder.release()
    assert later.acquire(timeout=1)  # neither the turn nor the place in line is held
    later.release()
    assert impatient.acquire(timeout=1)
    impatient.release()
