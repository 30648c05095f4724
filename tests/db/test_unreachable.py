"""Which database errors mean "the database is unreachable": a component that retries
says so in one line while the database restarts, and keeps the traceback for the rest."""

from __future__ import annotations

import logging
from pathlib import Path

import psycopg
import pytest
import sqlalchemy
from sqlalchemy.exc import DBAPIError, OperationalError

from tailrace.db import create_engine, log_failure, unreachable

log = logging.getLogger("tests.unreachable")


def _refused() -> DBAPIError:
    """What connecting to a PostgreSQL URL where nothing listens raises."""
    engine = sqlalchemy.create_engine(
        "postgresql+psycopg://postgres@127.0.0.1:1/nothing", connect_args={"connect_timeout": 2}
    )
    try:
        with engine.connect():
            pass
    except DBAPIError as exc:
        return exc
    finally:
        engine.dispose()
    raise AssertionError("something accepted a connection on port 1")


def test_a_refused_connection_is_unreachable_and_logged_in_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    exc = _refused()
    reason = unreachable(exc)
    assert reason is not None and "\n" not in reason and "refused" in reason.lower()
    with caplog.at_level(logging.WARNING, logger=log.name):
        log_failure(log, exc, "scheduler step", "retrying in 5s")
    [record] = caplog.records
    assert record.levelno == logging.WARNING and record.exc_info is None
    assert record.getMessage() == (
        f"scheduler step failed: the database is unreachable ({reason}); retrying in 5s"
    )


def test_a_server_shutting_down_is_unreachable_and_a_deadlock_is_not() -> None:
    shutdown = psycopg.errors.AdminShutdown("terminating connection due to administrator command")
    assert unreachable(OperationalError("SELECT 1", {}, shutdown)) == (
        "terminating connection due to administrator command"
    )
    for orig in (
        psycopg.errors.DeadlockDetected("deadlock detected"),
        psycopg.errors.SerializationFailure("could not serialize access"),
        psycopg.errors.QueryCanceled("canceling statement due to statement timeout"),
    ):
        assert unreachable(OperationalError("SELECT 1", {}, orig)) is None, orig
    assert unreachable(ValueError("not a database error")) is None


def test_other_database_errors_keep_their_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    try:
        with engine.connect() as conn, pytest.raises(OperationalError) as raised:
            conn.execute(sqlalchemy.text("SELECT * FROM no_such_table"))
    finally:
        engine.dispose()
    assert unreachable(raised.value) is None
    with caplog.at_level(logging.WARNING, logger=log.name):
        log_failure(log, raised.value, "triggerer sync", "retrying")
    [record] = caplog.records
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert record.getMessage() == "triggerer sync failed; retrying"
