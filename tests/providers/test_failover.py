"""A triggerer killed mid-pagination: another resumes at the checkpointed next page."""

from __future__ import annotations

import os
import signal
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine, select

from tailrace.db.models import DagRun, Job, TaskInstance, Trigger
from tailrace.demo_api import DemoApiConfig, running_demo_api
from tailrace.serialization import loads
from tailrace.streams import read_items
from tailrace.testing import component_env, run_cli, start_component, stop_component, wait_for

PAGES = 30

DAG = """
from datetime import datetime
from tailrace import dag
from tailrace.providers.http import PaginatedHttpOperator

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def pager():
    PaginatedHttpOperator(task_id="fetch", http_conn_id="demo", endpoint="/orders/link")

pager()
"""


@pytest.fixture
def demo() -> Iterator[str]:
    with running_demo_api(DemoApiConfig(page_size=2, pages=PAGES, latency=0.05)) as url:
        yield url


@pytest.fixture
def cluster_env(database_url: str, dags_folder: Path, demo: str) -> dict[str, str]:
    (dags_folder / "pager.py").write_text(textwrap.dedent(DAG))
    env = component_env(
        database_url,
        dags_folder,
        worker_processes=1,
        trigger_lease_seconds=2,
        scheduler_poll_interval=0.5,
    )
    return {**env, "TAILRACE_CONN_DEMO": demo}


def page_path(page: int) -> str:
    return "/orders/link" if page == 0 else f"/orders/link?page={page + 1}"


@pytest.mark.slow
@pytest.mark.parametrize("db_backend", ["postgres"])
def test_kill_9_mid_pagination_resumes_at_the_next_page_without_refetching(
    cluster_env: dict[str, str], engine: Engine, demo: str
) -> None:
    scheduler = start_component(cluster_env, "scheduler")
    triggerers = [start_component(cluster_env, "triggerer") for _ in range(2)]
    try:
        trigger = run_cli(cluster_env, "dags", "trigger", "pager")
        assert trigger.returncode == 0, trigger.stderr

        def holder_mid_stream() -> tuple[int, int] | None:
            with engine.connect() as conn:
                row = conn.execute(
                    select(Trigger.next_sequence, Job.pid).join(
                        Job, Job.id == Trigger.triggerer_job_id
                    )
                ).first()
            if row is not None and 8 <= row.next_sequence < PAGES - 5:
                return row.pid, row.next_sequence
            return None

        victim_pid, durable = wait_for(holder_mid_stream, timeout=60)
        os.kill(victim_pid, signal.SIGKILL)
        next(p for p in triggerers if p.pid == victim_pid).wait()

        def run_state() -> str | None:
            with engine.connect() as conn:
                return conn.scalar(select(DagRun.state))

        wait_for(lambda: run_state() in ("success", "failed"), timeout=90)
        assert run_state() == "success"
        with engine.connect() as conn:
            ti_id = conn.scalar(select(TaskInstance.id))
            pages = [loads(v) for v in read_items(conn, ti_id, 0, 1000)]
        assert [[o["id"] for o in page] for page in pages] == [
            [2 * p + 1, 2 * p + 2] for p in range(PAGES)
        ], "every page once, in order"
        served = httpx.get(f"{demo}/stats").json()["requests"]
        # Pages whose events were durable before the kill were never fetched again; the
        # survivor started at the checkpointed next page (a page in flight may repeat).
        assert [served.get(page_path(p)) for p in range(durable)] == [1] * durable
        assert all(1 <= served.get(page_path(p), 0) <= 2 for p in range(PAGES))
        assert sum(served.values()) <= PAGES + 2
    finally:
        for proc in [scheduler, *triggerers]:
            stop_component(proc)
