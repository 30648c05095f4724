"""A real Prometheus server (Debian's ``prometheus``, installed by scripts/install-prometheus)
scrapes ``tailrace standalone`` while a streaming run is under way; the series are read
back through Prometheus' HTTP API. Skipped locally without the binary, failed under CI."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tailrace.testing import run_cli, start_component, stop_component, wait_for

WriteDag = Callable[[str, str], Path]

STREAMING_DAG = """
import asyncio
from datetime import datetime
from pathlib import Path

from tailrace import BaseOperator, BaseTrigger, StartTriggerArgs, TriggerEvent, dag, task

GATE = Path(__file__).parent / "gate"


class Pages(BaseTrigger):
    # Three pages at once, then the rest once the test opens the gate.
    def serialize(self):
        return (f"{__name__}.Pages", {})

    async def run(self):
        for i in range(10):
            if i == 3:
                while not GATE.exists():
                    await asyncio.sleep(0.02)
            yield TriggerEvent({"n": i})


class Stream(BaseOperator):
    start_from_trigger = True
    start_trigger_args = StartTriggerArgs(trigger_cls=f"{__name__}.Pages", trigger_kwargs={})

    def execute(self, context):
        raise AssertionError("starts in the triggerer")


@task
def handle(page):
    return page["n"]


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def scraped():
    handle.iterate(page=Stream(task_id="pages").output)


scraped()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def prometheus_binary() -> str:
    path = shutil.which("prometheus")
    if path is None:
        reason = "prometheus is not installed (scripts/install-prometheus)"
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail(f"{reason}; CI requires it")
        pytest.skip(reason)
    return path


@pytest.fixture
def prometheus(prometheus_binary: str, tmp_path: Path) -> Iterator[tuple[str, int]]:
    """A Prometheus server scraping 127.0.0.1:<the port it yields> every second."""
    target_port, port = _free_port(), _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: tailrace\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{target_port}']\n"
    )
    log = open(tmp_path / "prometheus.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [
            prometheus_binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:

        def ready() -> bool:
            try:
                return httpx.get(f"{base}/-/ready", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(ready, timeout=60)
        yield base, target_port
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def query(base: str, promql: str) -> list[dict[str, Any]]:
    body = httpx.get(f"{base}/api/v1/query", params={"query": promql}, timeout=10).json()
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def scalar(base: str, promql: str) -> float | None:
    result = query(base, promql)
    return float(result[0]["value"][1]) if result else None


@pytest.mark.slow
@pytest.mark.parametrize("db_backend", ["sqlite"])
def test_prometheus_scrapes_every_process_of_standalone_during_a_streaming_run(
    prometheus: tuple[str, int],
    database_url: str,
    dags_folder: Path,
    write_dag: WriteDag,
    tmp_path: Path,
) -> None:
    base, api_port = prometheus
    write_dag("scraped.py", STREAMING_DAG)
    env = {
        **os.environ,
        "TAILRACE_DATABASE_URL": database_url,
        "TAILRACE_DAGS_FOLDER": str(dags_folder),
        "TAILRACE_WORKER_PROCESSES": "2",
        "TAILRACE_API_PORT": str(api_port),
        "TAILRACE_DAGS_ARE_PAUSED_AT_CREATION": "false",
        "COLUMNS": "200",
    }
    proc = start_component(env, "standalone", "--no-examples", output=tmp_path / "out.txt")
    try:
        assert wait_for(lambda: scalar(base, 'up{job="tailrace"}') == 1, timeout=60)
        triggered = run_cli(env, "dags", "trigger", "scraped")
        assert triggered.returncode == 0, triggered.stdout + triggered.stderr
        stream = 'dag_id="scraped",task_id="pages"'

        # Mid-run: three pages produced, the trigger waits at the gate.
        produced = f"tailrace_stream_events_produced_total{{{stream}}}"
        assert wait_for(lambda: scalar(base, produced) == 3, timeout=60)
        assert scalar(base, "tailrace_triggers_running") == 1
        (dags_folder / "gate").touch()

        done = 'tailrace_ti_finish_total{dag_id="scraped",task_id="handle",state="success"}'
        assert wait_for(lambda: scalar(base, done) == 10, timeout=120)
        assert wait_for(lambda: scalar(base, produced) == 10, timeout=30)
        acked = f"tailrace_stream_events_acknowledged_total{{{stream}}}"
        assert wait_for(lambda: scalar(base, acked) == 10, timeout=30)
        # Recorded by the worker processes, served by the API process.
        durations = 'tailrace_task_duration_seconds_count{dag_id="scraped",task_id="handle"}'
        assert wait_for(lambda: scalar(base, durations) == 10, timeout=30)
        runs = 'tailrace_dagrun_duration_seconds_count{dag_id="scraped",state="success"}'
        assert wait_for(lambda: scalar(base, runs) == 1, timeout=30)
        # The scheduler's own series, and the API's (its scrapes are requests too).
        # A heartbeat comes every poll interval: a run can finish before the first one.
        beats = "tailrace_scheduler_heartbeat_total"
        assert wait_for(lambda: (scalar(base, beats) or 0) >= 1, timeout=60)
        assert scalar(base, "tailrace_scheduler_scheduler_loop_duration_seconds_count")
        scrapes = 'tailrace_api_requests_total{route="/metrics",status="200"}'
        assert (scalar(base, scrapes) or 0) >= 1
        # Labels stay bounded: no series names a run.
        assert not query(base, '{__name__=~"tailrace_.+", run_id!=""}')
    finally:
        assert stop_component(proc) == 0


@pytest.mark.slow
@pytest.mark.parametrize("db_backend", ["sqlite"])
def test_a_component_serves_its_own_metrics_port(
    database_url: str, dags_folder: Path, write_dag: WriteDag, tmp_path: Path
) -> None:
    write_dag("scraped.py", STREAMING_DAG)
    port = _free_port()
    env = {
        **os.environ,
        "TAILRACE_DATABASE_URL": database_url,
        "TAILRACE_DAGS_FOLDER": str(dags_folder),
        "TAILRACE_WORKER_PROCESSES": "2",
        "TAILRACE_METRICS_PORT": str(port),
        "COLUMNS": "200",
    }
    output = tmp_path / "out.txt"
    proc = start_component(env, "scheduler", output=output)
    try:
        said = f"Metrics at http://127.0.0.1:{port}/metrics"
        assert wait_for(lambda: said in output.read_text(), timeout=30)

        def loop_seen() -> bool:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            return "tailrace_scheduler_scheduler_loop_duration_seconds_count" in text

        assert wait_for(loop_seen, timeout=60)
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert "tailrace_dag_processing_total_parse_time_seconds" in text
        assert "tailrace_executor_open_slots 2.0" in text
    finally:
        assert stop_component(proc) == 0


def test_the_documented_prometheus_configuration_is_one_prometheus_accepts(
    prometheus_binary: str, tmp_path: Path
) -> None:
    page = Path(__file__).resolve().parents[2] / "docs" / "concepts" / "metrics-and-logs.md"
    block = page.read_text().split("```yaml\n", 1)[1].split("```", 1)[0]
    config = tmp_path / "prometheus.yml"
    config.write_text(block)
    promtool = Path(prometheus_binary).with_name("promtool")
    checked = subprocess.run(
        [str(promtool), "check", "config", str(config)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
