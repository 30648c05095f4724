"""LatestOnlyOperator across two scheduled runs and a manual one, as in Airflow 3: the
run of an earlier interval skips the downstream tasks, the latest and manual ones run
them."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import select

from tailrace.db.models import DagRun
from tailrace.testing import DagHarness

WriteDag = Callable[[str, str], Path]

SOURCE = """
from datetime import datetime
from tailrace import DAG, EmptyOperator, LatestOnlyOperator
from tailrace.sdk.operators.latest_only import LatestOnlyOperator as FromModule

assert FromModule is LatestOnlyOperator

with DAG(
    "latest",
    schedule="@daily",
    start_date=datetime.fromisoformat({start!r}),
    catchup=True,
):
    latest_only = LatestOnlyOperator(task_id="latest_only")
    work = EmptyOperator(task_id="work")
    after = EmptyOperator(task_id="after")
    independent = EmptyOperator(task_id="independent")
    latest_only >> work >> after
"""


def _scheduled_runs(harness: DagHarness) -> list[tuple[int, str, str | None]]:
    with harness.engine.connect() as conn:
        rows = conn.execute(
            select(DagRun.id, DagRun.run_type, DagRun.state)
            .where(DagRun.dag_id == "latest")
            .order_by(DagRun.logical_date)
        ).all()
    return [(r.id, r.run_type, r.state) for r in rows]


def test_only_the_latest_scheduled_run_and_manual_runs_run_downstream(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    write_dag("latest.py", SOURCE.format(start=(today - timedelta(days=1)).isoformat()))
    harness.parse()
    harness.start()

    def two_finished() -> bool:
        runs = _scheduled_runs(harness)
        return len(runs) == 2 and all(state == "success" for _, _, state in runs)

    assert harness.scheduler.run_until(two_finished, timeout=60)
    (older, older_type, _), (latest, latest_type, _) = _scheduled_runs(harness)
    assert (older_type, latest_type) == ("scheduled", "scheduled")
    assert harness.states(older) == {
        "latest_only": "success",
        "work": "skipped",
        "after": "skipped",
        "independent": "success",
    }
    assert harness.states(latest) == {
        "latest_only": "success",
        "work": "success",
        "after": "success",
        "independent": "success",
    }
    assert "Not latest execution, skipping downstream." in harness.log(older, "latest_only")

    # A manual run of the older interval is not skipped.
    manual = harness.trigger("latest", logical_date=today - timedelta(days=1, hours=1))
    assert harness.run(manual)["state"] == "success"
    assert harness.states(manual)["after"] == "success"
    assert "Manually triggered" in harness.log(manual, "latest_only")
