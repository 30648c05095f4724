"""A scheduler killed with ``kill -9`` just before a run's deadline, and started again
after it: the missed deadline's callback is still called, exactly once."""

from __future__ import annotations

import json
import os
import signal
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select

from tailrace.db.models import DagCallback, DagRun, Deadline
from tailrace.testing import component_env, run_cli, start_component, stop_component, wait_for

# Timing-sensitive (the kill must land before the deadline), and slow.
pytestmark = [pytest.mark.exclusive, pytest.mark.slow]

# Long enough for the scheduler to start the run's task first, short for a test.
INTERVAL_SECONDS = 12

DAG = f"""
import json, os, time
from datetime import datetime, timedelta
from pathlib import Path
from tailrace import DeadlineAlert, DeadlineReference, SyncCallback, dag, task

HERE = Path(__file__).parent


def alert(context, text):
    with open(HERE / "calls.jsonl", "a") as f:
        f.write(json.dumps({{"text": text, "run_id": context["dag_run"]["run_id"]}}) + "\\n")


@dag(
    schedule=None,
    start_date=datetime(2026, 1, 1),
    deadline=DeadlineAlert(
        reference=DeadlineReference.DAGRUN_QUEUED_AT,
        interval=timedelta(seconds={INTERVAL_SECONDS}),
        callback=SyncCallback(alert, kwargs={{"text": "{{{{ dag_run.dag_id }}}} is late"}}),
    ),
)
def restart_deadline():
    @task(retries=3, retry_delay=0)
    def slow():
        while not (HERE / "release").exists():
            time.sleep(0.02)

    slow()

restart_deadline()
"""


@pytest.fixture
def env(database_url: str, dags_folder: Path) -> dict[str, str]:
    (dags_folder / "restart_deadline.py").write_text(textwrap.dedent(DAG))
    # Two workers: the run's task holds one until the test releases it.
    return component_env(database_url, dags_folder, worker_processes=2, scheduler_poll_interval=0.5)


def test_kill_9_just_before_a_deadline_still_calls_its_callback_exactly_once(
    env: dict[str, str], engine: Engine, dags_folder: Path
) -> None:
    scheduler = start_component(env, "scheduler")
    try:
        trigger = run_cli(env, "dags", "trigger", "restart_deadline")
        assert trigger.returncode == 0, trigger.stderr
        with engine.connect() as conn:
            deadline_time = conn.scalar(select(Deadline.deadline_time))
        assert deadline_time is not None

        def running() -> bool:
            with engine.connect() as conn:
                return conn.scalar(select(DagRun.state)) == "running"

        wait_for(running, timeout=60)
        # Just before the deadline, the scheduler and its workers die together.
        wait_for(lambda: datetime.now(UTC) >= deadline_time - timedelta(seconds=1.5), timeout=60)
        os.killpg(scheduler.pid, signal.SIGKILL)
        stop_component(scheduler)
        assert datetime.now(UTC) < deadline_time, "the kill came too late to test anything"
        with engine.connect() as conn:
            assert conn.scalar(select(Deadline.missed)) is False
        scheduler = start_component(env, "scheduler")

        def called() -> str | None:
            with engine.connect() as conn:
                state = conn.scalar(select(DagCallback.state).where(DagCallback.kind == "deadline"))
            return state if state in ("success", "failed") else None

        assert wait_for(called, timeout=120) == "success"
        (dags_folder / "release").touch()

        def finished() -> bool:
            with engine.connect() as conn:
                return conn.scalar(select(DagRun.state)) in ("success", "failed")

        wait_for(finished, timeout=120)
    finally:
        stop_component(scheduler)
    lines = [json.loads(x) for x in (dags_folder / "calls.jsonl").read_text().splitlines()]
    assert lines == [{"text": "restart_deadline is late", "run_id": lines[0]["run_id"]}]
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(DagCallback)) == 1
        missed = conn.execute(select(Deadline.missed, Deadline.missed_at)).one()
    assert missed.missed and missed.missed_at >= deadline_time
