from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import Engine, insert, select
from sqlalchemy.exc import StatementError

from tailrace.db import NaiveDatetimeError, UTCDateTime
from tailrace.db.models import Job

KOLKATA = timezone(timedelta(hours=5, minutes=30))


def job(started: datetime, name: str = "scheduler") -> dict[str, object]:
    return {
        "job_type": name,
        "hostname": "host",
        "pid": 1,
        "state": "running",
        "start_date": started,
        "latest_heartbeat": started,
    }


def test_aware_datetimes_come_back_aware_in_utc(engine: Engine) -> None:
    started = datetime(2024, 3, 1, 12, 30, 15, 123456, tzinfo=KOLKATA)
    with engine.begin() as conn:
        conn.execute(insert(Job), [job(started)])
    with engine.connect() as conn:
        stored = conn.scalars(select(Job.start_date)).one()

    assert stored == started
    assert stored.tzinfo is UTC
    assert stored == datetime(2024, 3, 1, 7, 0, 15, 123456, tzinfo=UTC)


def test_comparisons_compare_instants_across_zones(engine: Engine) -> None:
    base = datetime(2024, 1, 1, 12, tzinfo=UTC)
    # Earlier instants with later wall-clock times, had they been stored as written.
    jobs = [
        job(base.astimezone(KOLKATA) - timedelta(minutes=1), "a"),
        job(base, "b"),
        job(base.astimezone(timezone(timedelta(hours=-8))) + timedelta(minutes=1), "c"),
    ]
    with engine.begin() as conn:
        conn.execute(insert(Job), jobs)
        before = conn.scalars(select(Job.job_type).where(Job.start_date < base)).all()
        ordered = conn.scalars(select(Job.job_type).order_by(Job.start_date)).all()

    assert before == ["a"]
    assert ordered == ["a", "b", "c"]


def test_naive_datetimes_are_refused(engine: Engine) -> None:
    with pytest.raises(StatementError) as raised, engine.begin() as conn:
        conn.execute(insert(Job), [job(datetime(2024, 1, 1, 12))])

    assert isinstance(raised.value.orig, NaiveDatetimeError)
    assert "naive datetime 2024-01-01T12:00:00" in str(raised.value)


def test_the_type_alone_rejects_naive_and_non_datetimes() -> None:
    from sqlalchemy.dialects import postgresql, sqlite

    column_type = UTCDateTime()
    with pytest.raises(NaiveDatetimeError, match=r"datetime\.now\(UTC\)"):
        column_type.process_bind_param(datetime(2024, 1, 1), sqlite.dialect())
    with pytest.raises(TypeError, match="expected a datetime, got str"):
        column_type.process_bind_param("2024-01-01", sqlite.dialect())
    aware = datetime(2024, 1, 1, 5, 30, tzinfo=KOLKATA)
    assert column_type.process_bind_param(aware, sqlite.dialect()) == datetime(2024, 1, 1)
    assert column_type.process_bind_param(aware, postgresql.dialect()) == datetime(
        2024, 1, 1, tzinfo=UTC
    )
    assert column_type.process_bind_param(None, sqlite.dialect()) is None


def test_sqlite_keeps_one_text_format_and_reads_sqlites_own() -> None:
    # The stored text is SQLAlchemy's DATETIME format to the microsecond (so text order
    # is time order, whatever the fraction); SQLite's own CURRENT_TIMESTAMP text, without
    # a fraction, reads back as the UTC instant it names.
    from sqlalchemy import create_engine as plain_engine
    from sqlalchemy import text

    engine = plain_engine("sqlite://")
    with engine.begin() as conn:
        Job.__table__.create(conn)
        conn.execute(insert(Job), [job(datetime(2024, 1, 1, 17, 30, tzinfo=KOLKATA))])
        conn.execute(insert(Job), [job(datetime(2024, 1, 1, 12, 0, 0, 5, tzinfo=UTC), "b")])
        stored = conn.scalars(text("SELECT start_date FROM job ORDER BY start_date")).all()
        conn.execute(text("UPDATE job SET latest_heartbeat = CURRENT_TIMESTAMP"))
        beats = conn.scalars(select(Job.latest_heartbeat)).all()
    assert stored == ["2024-01-01 12:00:00.000000", "2024-01-01 12:00:00.000005"]
    assert all(b.tzinfo is UTC and abs(b - datetime.now(UTC)) < timedelta(hours=1) for b in beats)
    engine.dispose()
