"""A try's context has its own run's dates, as pendulum DateTimes in the run's zone,
whichever run the worker's previous try was of (a worker keeps the last run's)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pendulum

from tailrace import DAG
from tailrace.execution import RunTask
from tailrace.execution._worker import RuntimeTI, job_context
from tailrace.sdk.operators.python import PythonOperator
from tailrace.testing import manual_try


def _job(logical_date: datetime | None, conf: dict[str, object]) -> RunTask:
    return manual_try(
        "dates", "t", fileloc=__file__, log_path="unused.log", logical_date=logical_date, conf=conf
    )


def test_each_try_gets_its_own_run_s_dates_in_its_own_zone() -> None:
    with DAG("dates", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        PythonOperator(task_id="t", python_callable=lambda: None)
    first = datetime(2026, 3, 1, 12, tzinfo=UTC)
    same_instant_elsewhere = first.astimezone(timezone(timedelta(hours=2)))
    for when in (first, first, same_instant_elsewhere, None, first + timedelta(hours=1)):
        job = _job(when, {"when": str(when)})
        context = job_context(job, RuntimeTI(job, 1 << 20), dag)
        assert context["dag_run"].conf == {"when": str(when)}
        if when is None:
            assert context["logical_date"] is None
            continue
        assert isinstance(context["logical_date"], pendulum.DateTime)
        assert context["logical_date"] == when
        assert context["logical_date"].utcoffset() == when.utcoffset()
        assert context["data_interval_end"] == when + timedelta(days=1)
        assert context["ts"] == when.isoformat()
