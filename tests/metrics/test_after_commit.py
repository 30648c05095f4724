"""What a transaction records for metrics counts once it commits, never if it rolls back,
and a rollback of a connection whose database went away still completes."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, text

from tailrace.metrics._hook import after_commit


def test_recorded_once_on_commit_and_never_on_rollback(engine: Engine) -> None:
    counted: list[str] = []
    with engine.begin() as conn:
        after_commit(conn, lambda: counted.append("committed"))
        assert counted == []
    assert counted == ["committed"]
    with pytest.raises(RuntimeError), engine.begin() as conn:
        after_commit(conn, lambda: counted.append("rolled back"))
        raise RuntimeError("the step failed")
    with engine.begin() as conn:  # the same pooled connection: nothing left over
        conn.execute(text("SELECT 1"))
    assert counted == ["committed"]


def test_a_rollback_after_the_connection_was_lost_completes(engine: Engine) -> None:
    # As when PostgreSQL restarts mid-step: the connection is invalidated, then the step's
    # transaction rolls back. The rollback must not raise, and the engine reconnects.
    counted: list[str] = []
    with pytest.raises(RuntimeError), engine.begin() as conn:
        after_commit(conn, lambda: counted.append("lost"))
        conn.invalidate()
        raise RuntimeError("the database went away")
    with engine.begin() as conn:
        assert conn.execute(text("SELECT 1")).scalar() == 1
    assert counted == []
