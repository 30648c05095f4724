"""A try's context has its own run's dates, as pendulum DateTimes in the run's zone,
whichever run the worker's previous try was of (a worker keeps the last run's)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pendulum

from tailrace import DAG
from tailrace.execution import RunTask
from tailrace.execution._worker import RuntimeTI, job_context
from tailrace.execution.protocol import DagRunPayload
from tailrace.sdk.operators.python import PythonOperator


def _job(logical_date: datetime | None, conf: dict[str, object]) -> RunTask:
    run = DagRunPayload(
        dag_id="dates",
        run_id=f"manual__{logical_date}",
        run_type="manual",
        logical_date=logical_date,
        data_interval_start=logical_date,
        data_interval_end=logical_date + timedelta(days=1) if logical_date else None,
        start_date=logical_date,
        conf=conf,
    )
    return RunTask(
        ti_id=1,
        dag_run_id=1,
        dag_id="dates",
        task_id="t",
        map_index=-1,
        try_number=1,
        max_tries=0,
        fileloc=__file__,
        dag_run=run,
        log_path="unused.log",
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
