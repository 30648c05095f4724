"""A scheduler killed with ``kill -9`` while its worker runs a DAG callback: the
callback's workers died with it, and the next scheduler runs the callback again."""

from __future__ import annotations

import os
import signal
import textwrap
from pathlib import Path

from sqlalchemy import Engine, select

from tailrace.db.models import DagCallback, Job
from tailrace.testing import component_env, run_cli, start_component, stop_component, wait_for

CALLBACK_DAG = """
import os, time
from pathlib import Path
from tailrace import dag, task

HERE = Path(__file__).parent


def page_someone(context):
    with open(HERE / "calls.txt", "a") as f:
        f.write(f"start {os.getpid()}\\n")
    while not (HERE / "release").exists():
        time.sleep(0.02)
    with open(HERE / "calls.txt", "a") as f:
        f.write(f"done {os.getpid()}\\n")


@dag(schedule=None, on_success_callback=page_someone)
def paged():
    @task
    def work():
        return 1

    work()

paged()
"""


def _lines(folder: Path) -> list[str]:
    calls = folder / "calls.txt"
    return calls.read_text().splitlines() if calls.exists() else []


def _callback(engine: Engine) -> DagCallback | None:
    with engine.connect() as conn:
        return conn.execute(select(DagCallback)).first()


def test_a_callback_whose_scheduler_was_killed_runs_again_under_the_next(
    database_url: str, dags_folder: Path, engine: Engine
) -> None:
    (dags_folder / "paged.py").write_text(textwrap.dedent(CALLBACK_DAG))
    env = component_env(database_url, dags_folder, worker_processes=1, scheduler_poll_interval=0.5)
    scheduler = start_component(env, "scheduler")
    try:
        assert run_cli(env, "dags", "trigger", "paged").returncode == 0
        wait_for(lambda: len(_lines(dags_folder)) == 1, timeout=60)
        queued = _callback(engine)
        assert queued is not None and queued.state == "queued"
        first_owner = queued.queued_by_job_id
        # The scheduler and the worker running the callback die together.
        os.killpg(scheduler.pid, signal.SIGKILL)
        stop_component(scheduler)
        (dags_folder / "release").touch()
        scheduler = start_component(env, "scheduler")
        done = wait_for(
            lambda: (row := _callback(engine)) is not None and row.state == "success" and row,
            timeout=60,
        )
    finally:
        stop_component(scheduler)
    # It ran again, to its end, in a worker of the new scheduler: at least once.
    (killed, again, finished) = _lines(dags_folder)
    assert killed.startswith("start ") and again.startswith("start ")
    assert finished == "done " + again.removeprefix("start ") != "done " + killed[6:]
    with engine.connect() as conn:
        jobs = set(conn.scalars(select(Job.id).where(Job.job_type == "scheduler")))
    assert len(jobs) == 2 and done.queued_by_job_id in jobs
    assert done.queued_by_job_id != first_owner
