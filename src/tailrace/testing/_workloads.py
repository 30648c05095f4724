"""A try's workload as a scheduler hands it to a worker, for tests that drive workers and
executors without a scheduler."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from tailrace.execution.protocol import DagRunPayload, RunTask


def manual_try(
    dag_id: str,
    task_id: str,
    *,
    ti_id: int = 1,
    map_index: int = -1,
    fileloc: str = "",
    log_path: str = "",
    logical_date: datetime | None = None,
    conf: dict[str, Any] | None = None,
    **fields: Any,
) -> RunTask:
    """The first try of ``task_id`` in a manual run of ``dag_id`` (logged at
    ``log_path``), whose logical date, if any, starts a one-day interval; ``fields`` set
    the rest of the workload (``queue``, ``execution_timeout``, ``next_method`` …)."""
    run = DagRunPayload(
        dag_id=dag_id,
        run_id=f"manual__{logical_date}",
        run_type="manual",
        logical_date=logical_date,
        data_interval_start=logical_date,
        data_interval_end=logical_date + timedelta(days=1) if logical_date else None,
        start_date=logical_date,
        conf=conf or {},
    )
    return RunTask(
        ti_id=ti_id,
        dag_run_id=1,
        dag_id=dag_id,
        task_id=task_id,
        map_index=map_index,
        try_number=1,
        max_tries=0,
        fileloc=fileloc,
        dag_run=run,
        log_path=log_path,
        **fields,
    )
