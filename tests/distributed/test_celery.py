"""The Celery executor end to end: scheduler, triggerer, api-server and `tailrace worker`
as separate processes on PostgreSQL, over Redis and over RabbitMQ."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, select, update

from tailrace.db.models import DagCallback, DagRun, TaskInstance, XCom
from tailrace.execution import log_path_for
from tailrace.streams import read_items
from tailrace.testing import run_cli, wait_for

from .conftest import Cluster, _free_port

BASICS = """
import asyncio
import os
from datetime import datetime
from tailrace import BaseOperator, BaseTrigger, TriggerEvent, dag, task

class Ticks(BaseTrigger):
    def __init__(self, n, pause=0.02):
        super().__init__()
        self.n = n
        self.pause = pause

    def serialize(self):
        return (f"{type(self).__module__}.Ticks", {"n": self.n, "pause": self.pause})

    async def run(self):
        start = self.checkpoint["next"] if self.checkpoint else 0
        for i in range(start, self.n):
            await asyncio.sleep(self.pause)
            yield TriggerEvent({"i": i}, checkpoint={"next": i + 1})

class Collect(BaseOperator):
    def execute(self, context):
        self.defer(trigger=Ticks(n=12), method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):
        for event in events:
            yield event.payload["i"] * 10

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def celery_basics():
    @task
    def numbers():
        print(f"numbers runs in worker pid {os.getpid()}")
        return [1, 2, 3]

    @task
    def square(n):
        return n * n

    @task
    def total(values):
        return sum(values)

    @task
    def letters():
        yield from "abc"

    @task
    def shout(letter):
        return letter.upper()

    @task(queue="heavy")
    def crunch():
        return os.getpid()

    total(square.expand(n=numbers()))
    Collect(task_id="collect", max_batch_size=4)
    shout.iterate(letter=letters())
    crunch()

celery_basics()
"""

GATED = """
import os
import time
from datetime import datetime
from tailrace import dag, task

@dag(schedule=None, start_date=datetime(2026, 1, 1), params={"started": "", "gate": ""})
def celery_gated():
    @task
    def wait_for_gate(**context):
        params = context["params"]
        open(params["started"], "w").write(str(os.getpid()))
        while not os.path.exists(params["gate"]):
            time.sleep(0.05)
        return "opened"

    wait_for_gate()

celery_gated()
"""


def _run_state(engine: Engine, dag_id: str) -> str | None:
    with engine.connect() as conn:
        state = conn.scalar(select(DagRun.state).where(DagRun.dag_id == dag_id))
    return state if state in ("success", "failed") else None


def _xcom(engine: Engine, task_id: str, map_index: int = -1) -> Any:
    with engine.connect() as conn:
        return conn.scalar(
            select(XCom.value).where(XCom.task_id == task_id, XCom.map_index == map_index)
        )


def _start_all(cluster: Cluster, *queues: str) -> None:
    cluster.start("api", "api-server")
    cluster.start("scheduler", "scheduler")
    cluster.start("triggerer", "triggerer")
    cluster.start("worker", "worker", "--concurrency", "2")
    for queue in queues:
        cluster.start(f"worker-{queue}", "worker", "--queues", queue, "--concurrency", "1")


@pytest.mark.parametrize("db_backend", ["postgres"])
def test_celery_workers_run_every_kind_of_task_and_report_through_the_api(
    cluster: Cluster, engine: Engine, dags_folder: Path
) -> None:
    (dags_folder / "celery_basics.py").write_text(textwrap.dedent(BASICS))
    _start_all(cluster, "heavy")
    triggered = run_cli(cluster.env, "dags", "trigger", "celery_basics")
    assert triggered.returncode == 0, triggered.stderr

    state = wait_for(lambda: _run_state(engine, "celery_basics"), timeout=120)
    assert state == "success", cluster.output()
    assert _xcom(engine, "total") == "14"
    assert [_xcom(engine, "shout", i) for i in range(3)] == ['"A"', '"B"', '"C"']
    with engine.connect() as conn:
        collect_id = conn.scalar(select(TaskInstance.id).where(TaskInstance.task_id == "collect"))
        assert read_items(conn, collect_id) == [str(i * 10) for i in range(12)]
        numbers = conn.execute(select(TaskInstance).where(TaskInstance.task_id == "numbers")).one()
    # The worker's log reached the api-server's log folder, with the task's own line.
    log = log_path_for(
        cluster.env["TAILRACE_HOME"] + "/logs", "celery_basics", numbers.run_id, "numbers", -1, 1
    ).read_text()
    assert f"numbers runs in worker pid {numbers.pid}" in log
    assert "Task finished: success" in log
    # Every try's spool was shipped and removed, leaving no folders behind: a folder per
    # pool process is all the spool holds.
    spool = Path(cluster.env["TAILRACE_HOME"]) / "worker-log-spool"
    wait_for(lambda: all(p.is_dir() and p.parent == spool for p in spool.rglob("*")), timeout=30)
    worker_pids = {p.pid for p in cluster.procs.values()}
    assert numbers.pid not in worker_pids, "the task ran in a pool process, not the worker's own"
    # An operator's queue picks its workers: only the one consuming "heavy" ran crunch.
    heavy_log = (cluster.logs / "worker-heavy.log").read_text()
    assert "celery_basics.crunch" in heavy_log
    assert "celery_basics.crunch" not in (cluster.logs / "worker.log").read_text()
    assert "celery_basics.numbers" not in heavy_log


@pytest.mark.parametrize("db_backend", ["postgres"])
def test_a_try_cleared_while_it_runs_is_stopped_on_its_worker(
    cluster: Cluster, engine: Engine, dags_folder: Path, tmp_path: Path
) -> None:
    (dags_folder / "celery_gated.py").write_text(textwrap.dedent(GATED))
    _start_all(cluster)
    started, gate = tmp_path / "started", tmp_path / "gate"
    conf = f'{{"started": "{started}", "gate": "{gate}"}}'
    assert run_cli(cluster.env, "dags", "trigger", "celery_gated", "--conf", conf).returncode == 0
    pid = int(wait_for(lambda: started.exists() and started.read_text(), timeout=60))

    # What `tasks clear` does to a running instance: the try is no longer current.
    with engine.begin() as conn:
        conn.execute(
            update(TaskInstance).where(TaskInstance.task_id == "wait_for_gate").values(state=None)
        )

    def gone() -> bool:
        try:
            Path(f"/proc/{pid}").stat()
        except FileNotFoundError:
            return True
        return Path(f"/proc/{pid}/status").read_text().find("State:\tZ") >= 0

    assert wait_for(gone, timeout=30), "the worker kept running a try that was cleared"
    assert not gate.exists()


BATCHED = """
import os
import time
from datetime import datetime
from tailrace import dag, task

@dag(schedule=None, start_date=datetime(2026, 1, 1), params={"gate": ""})
def celery_batched():
    @task(priority_weight=10)
    def slow(**context):
        while not os.path.exists(context["params"]["gate"]):
            time.sleep(0.05)
        return os.getpid()

    @task
    def quick(n):
        return os.getpid()

    slow()
    quick.expand(n=list(range(6)))

celery_batched()
"""


@pytest.mark.parametrize("db_backend", ["postgres"])
def test_a_backlog_travels_in_batches_and_a_slow_try_hands_the_rest_of_its_batch_back(
    cluster: Cluster, engine: Engine, dags_folder: Path, tmp_path: Path
) -> None:
    """Seven ready tries and four slots: the first four go as one message (the broker has
    a backlog, ADR 0051), the slow one first. It holds its worker process; the three
    behind it go back to the broker after BATCH_SECONDS and run on the other process."""
    (dags_folder / "celery_batched.py").write_text(textwrap.dedent(BATCHED))
    cluster.env["TAILRACE_PARALLELISM"] = "4"
    cluster.start("api", "api-server")
    ports = {}
    for name, args in (("scheduler", ()), ("worker", ("--concurrency", "2"))):
        ports[name] = cluster.env["TAILRACE_METRICS_PORT"] = str(_free_port())
        cluster.start(name, name, *args)
    gate = tmp_path / "gate"
    conf = json.dumps({"gate": str(gate)})
    assert run_cli(cluster.env, "dags", "trigger", "celery_batched", "--conf", conf).returncode == 0

    def states(task_id: str) -> list[str | None]:
        with engine.connect() as conn:
            return list(
                conn.scalars(select(TaskInstance.state).where(TaskInstance.task_id == task_id))
            )

    wait_for(lambda: states("quick") == ["success"] * 6, timeout=90)
    assert states("slow") == ["running"], cluster.output()
    gate.touch()
    assert wait_for(lambda: _run_state(engine, "celery_batched"), timeout=60) == "success"
    quick_pids = {_xcom(engine, "quick", i) for i in range(6)}
    assert _xcom(engine, "slow") not in quick_pids
    assert "3 tries of this batch go back to the broker" in cluster.output()
    assert _counter(ports["scheduler"], "tailrace_celery_batched_tries_total") >= 4
    assert _counter(ports["worker"], "tailrace_celery_tries_handed_back_total") == 3


def _counter(port: str, name: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    )


CALLBACKS = """
import json
import os
from datetime import UTC, datetime, timedelta
from tailrace import dag, defer, task
from tailrace.sdk.triggers import DateTimeTrigger

OUT = {out!r}


def record(name):
    def callback(context):
        ti = context.get("ti")
        with open(OUT, "a") as f:
            f.write(json.dumps({{
                "callback": name,
                "reason": context.get("reason"),
                "numbers": ti.xcom_pull(task_ids="numbers") if ti else None,
                "pid": os.getpid(),
            }}) + "\\n")
    return callback


def broken(context):
    raise RuntimeError("the pager is down")


@dag(schedule=None, start_date=datetime(2026, 1, 1), on_failure_callback=[record("dag"), broken])
def celery_dag_callbacks():
    @task
    def numbers():
        return [1, 2, 3]

    # Its deferral times out in the scheduler: no worker is running it to call back.
    @task(on_failure_callback=record("task"))
    def waits(numbers, event=None):
        defer(DateTimeTrigger(datetime.now(UTC) + timedelta(days=1)), timeout=0.3)

    waits(numbers())

celery_dag_callbacks()
"""


def _callbacks(engine: Engine) -> list[Any] | None:
    with engine.connect() as conn:
        rows = conn.execute(select(DagCallback).order_by(DagCallback.id)).all()
    return rows if len(rows) == 2 and all(r.state in ("success", "failed") for r in rows) else None


@pytest.mark.parametrize("db_backend", ["postgres"])
def test_callbacks_run_on_a_celery_worker_read_xcoms_and_report_their_end(
    cluster: Cluster, engine: Engine, dags_folder: Path, tmp_path: Path
) -> None:
    out = tmp_path / "callback.jsonl"
    (dags_folder / "celery_dag_callbacks.py").write_text(
        textwrap.dedent(CALLBACKS.format(out=str(out)))
    )
    _start_all(cluster)
    triggered = run_cli(cluster.env, "dags", "trigger", "celery_dag_callbacks")
    assert triggered.returncode == 0, triggered.stderr
    assert wait_for(lambda: _run_state(engine, "celery_dag_callbacks"), timeout=120) == "failed"
    # Each callback's end came back through the execution API with its own token.
    task_row, dag_row = wait_for(lambda: _callbacks(engine), timeout=120)
    assert (task_row.kind, task_row.state, task_row.error) == ("failure", "success", None)
    assert task_row.task_instance_id is not None
    assert (dag_row.kind, dag_row.reason, dag_row.state) == ("failure", "task_failure", "failed")
    assert "1 of the DAG's on_failure_callback callables raised" in dag_row.error
    recorded = {c["callback"]: c for c in map(json.loads, out.read_text().splitlines())}
    # The task's callback read its upstream's XCom through the API, as a local one would.
    assert recorded["task"]["numbers"] == [1, 2, 3]
    assert recorded["dag"]["reason"] == "task_failure"
    # Not the scheduler: processes of the Celery worker.
    assert cluster.procs["scheduler"].pid not in {c["pid"] for c in recorded.values()}
    assert "tailrace.run_dag_callback" in (cluster.logs / "worker.log").read_text()
