"""LatestOnlyOperator: run the downstream tasks only in the latest scheduled run."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING

from tailrace.sdk import _clock as clock
from tailrace.sdk._context import Context
from tailrace.sdk._cron import WallClockCron
from tailrace.sdk._runtime import DagRunInfo
from tailrace.sdk.operators.python import BaseBranchOperator

if TYPE_CHECKING:
    from tailrace.sdk._dag import DAG

log = logging.getLogger("tailrace.task")


def latest_window(dag: DAG, dag_run: DagRunInfo) -> tuple[datetime, datetime] | None:
    """The moments within which ``dag_run`` is the DAG's latest scheduled run: after its
    data interval starts, up to and including the end of the next run's interval (what
    Airflow's LatestOnlyOperator compares "now" with). None when the schedule has no next
    run (``@once``, assets): the run is then the latest."""
    date = dag_run.logical_date or dag_run.data_interval_start or dag_run.start_date
    start = dag_run.data_interval_start or date
    end = dag_run.data_interval_end or date
    schedule = dag.parsed_schedule
    if start is None or end is None:
        return None
    if schedule.kind == "cron":
        assert schedule.cron is not None
        following = WallClockCron(schedule.cron, dag.timezone).next(end)
    elif schedule.kind == "delta":
        assert schedule.delta is not None
        following = end + schedule.delta
    else:
        return None
    return start, following


class LatestOnlyOperator(BaseBranchOperator):
    """Skip the downstream tasks unless this run is the latest scheduled one.

    A run is the latest while "now" is after its data interval's start and no later than
    the end of the next scheduled run's interval. Manual runs always proceed (as in
    Airflow 3); scheduled and backfill runs of earlier intervals skip every directly
    downstream task (and, by their trigger rules, what follows them).
    """

    ui_color = "#e9ffdb"

    def choose_branch(self, context: Context) -> list[str]:
        dag_run = context["dag_run"]
        downstream = sorted(self.downstream_task_ids)
        if dag_run.run_type == "manual":
            log.info("Manually triggered DAG_Run: allowing execution to proceed.")
            return downstream
        window = latest_window(self._require_dag(), dag_run)
        if window is None:
            log.info("Last scheduled execution: allowing execution to proceed.")
            return downstream
        left, right = window
        now = clock.utcnow()
        log.info(
            "Checking latest only with left_window: %s right_window: %s now: %s",
            left,
            right,
            now,
        )
        if not left < now <= right:
            log.info("Not latest execution, skipping downstream.")
            return []
        log.info("Latest, allowing execution to proceed.")
        return downstream
