"""A Celery worker killed with kill -9: how long until its tries run again, and what it
costs a 200-task fan-out, on Redis and on RabbitMQ.

    python -m benchmarks.bench_worker_loss recovery [--repeat 3] [--json]
    python -m benchmarks.bench_worker_loss fanout [--repeat 3] [--json]

Every component is its own process (`api-server`, `scheduler`, `worker`s of 2 processes)
on a throwaway PostgreSQL database (--database-url), over Redis (--redis-url) and RabbitMQ
(--rabbitmq-url, a virtual host of its own made with rabbitmqctl). Defaults as shipped:
worker_lost_timeout 6 s, task_heartbeat_timeout 60 s.

- recovery: two 30-second tasks on two workers of two processes; the worker running one
  or both is killed (with its pool), so the other has room for them. Measured: kill to
  the moment the last of its lost tries is running again (target: 15 s).
- fanout: 200 tasks of 0.4 s on two workers, undisturbed, then with one worker killed
  when 60 tasks have run (a replacement worker is started at once, as a supervisor
  would). Target: the disturbed run within the undisturbed one + 20 s.
Numbers are from one machine with 2 cores: every process shares them.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks._common import Rows, free_port, median, workspace

SECRET = "benchmark-secret-key-of-enough-length-1234"
DAGS = """
import time
from datetime import datetime
from tailrace import dag, task

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def slow_2():
    @task
    def hold(n):
        time.sleep(30)
        return n

    hold.expand(n=list(range(2)))

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def wide_200():
    @task
    def work(n):
        time.sleep(0.4)
        return n

    work.expand(n=list(range(200)))

slow_2()
wide_200()
"""
BROKERS = ("redis", "rabbitmq")


@contextmanager
def broker(args: argparse.Namespace, name: str) -> Iterator[str]:
    if name == "redis":
        import redis

        client = redis.Redis.from_url(args.redis_url)
        client.flushdb()
        try:
            yield args.redis_url
        finally:
            client.flushdb()
            client.close()
        return
    vhost = f"tailrace_bench_{uuid.uuid4().hex[:10]}"

    def ctl(*a: str) -> None:
        subprocess.run(["rabbitmqctl", *a], check=True, capture_output=True, timeout=60)

    ctl("add_vhost", vhost)
    try:
        ctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        yield f"{args.rabbitmq_url.rstrip('/')}/{vhost}"
    finally:
        ctl("delete_vhost", vhost)


class Deployment:
    def __init__(self, env: dict[str, str], engine: Any) -> None:
        self.env = env
        self.engine = engine
        self.workers: list[subprocess.Popen[str]] = []

    def start_worker(self) -> subprocess.Popen[str]:
        from tailrace.testing import start_component

        # Workers hold no database credentials.
        env = {**self.env, "TAILRACE_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}
        proc = start_component(env, "worker", "--concurrency", "2")
        self.workers.append(proc)
        return proc

    def kill_worker(self, proc: subprocess.Popen[str]) -> float:
        """kill -9 the worker and its pool; the wall-clock time of the kill."""
        from tailrace.testing import kill_component

        at = time.time()
        kill_component(proc)
        self.workers.remove(proc)
        return at


@contextmanager
def deployment(base: Path, args: argparse.Namespace, broker_url: str) -> Iterator[Deployment]:
    from tailrace.db import create_engine
    from tailrace.testing import (
        component_env,
        start_component,
        stop_components,
        temporary_postgres_database,
    )

    folder = base / "dags"
    folder.mkdir(exist_ok=True)
    (folder / "bench.py").write_text(DAGS)
    with ExitStack() as stack:
        url = stack.enter_context(temporary_postgres_database(args.database_url, migrate=True))
        port = free_port()
        env = component_env(
            url,
            folder,
            executor="celery",
            celery_broker_url=broker_url,
            secret_key=SECRET,
            api_port=port,
            execution_api_url=f"http://127.0.0.1:{port}",
            parallelism=64,
            scheduler_poll_interval=5,
        )
        env["TAILRACE_HOME"] = str(base / "home")
        procs = [start_component(env, "api-server"), start_component(env, "scheduler")]
        engine = create_engine(url)
        deployed = Deployment(env, engine)
        try:
            deployed.start_worker()
            deployed.start_worker()
            yield deployed
        finally:
            engine.dispose()
            stop_components(deployed.workers + procs)


def trigger(deployed: Deployment, dag_id: str) -> int:
    from tailrace.dagrun import trigger_dag_run
    from tailrace.notify import Wakeups

    pk, _ = trigger_dag_run(deployed.engine, dag_id, {})
    wakeups = Wakeups(deployed.env["TAILRACE_HOME"], deployed.engine)
    wakeups.send("scheduler")
    wakeups.close()
    return pk


def wait(condition: Any, timeout: float = 600.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError(f"{condition.__name__} not met within {timeout}s")


def _running_on(deployed: Deployment, proc: subprocess.Popen[str]) -> list[int]:
    from sqlalchemy import select

    from tailrace.db.models import TaskInstance

    with deployed.engine.connect() as conn:
        return list(
            conn.scalars(
                select(TaskInstance.id).where(
                    TaskInstance.state == "running",
                    TaskInstance.worker_name.like(f"tailrace-{proc.pid}@%"),
                )
            )
        )


def _busy_worker(deployed: Deployment) -> tuple[subprocess.Popen[str], list[int]] | None:
    for proc in deployed.workers:
        if running := _running_on(deployed, proc):
            return proc, running
    return None


def _run_state(deployed: Deployment, pk: int) -> tuple[str, float] | None:
    from sqlalchemy import select

    from tailrace.db.models import DagRun

    with deployed.engine.connect() as conn:
        row = conn.execute(select(DagRun.state, DagRun.start_date).where(DagRun.id == pk)).one()
    if row.state in ("success", "failed"):
        return row.state, (datetime.now(UTC) - row.start_date).total_seconds()
    return None


def recovery(args: argparse.Namespace) -> Rows:
    from sqlalchemy import func, select

    from tailrace.db.models import TaskInstance

    rows = []
    for name in args.brokers:
        times = []
        for _ in range(args.repeat):
            with (
                workspace() as base,
                broker(args, name) as url,
                deployment(base, args, url) as deployed,
            ):
                trigger(deployed, "slow_2")
                victim, lost = wait(lambda: _busy_worker(deployed))
                killed_at = deployed.kill_worker(victim)

                def running_again(lost: list[int] = lost) -> datetime | None:
                    with deployed.engine.connect() as conn:
                        row = conn.execute(
                            select(func.count(), func.max(TaskInstance.start_date)).where(
                                TaskInstance.id.in_(lost),
                                TaskInstance.state == "running",
                                TaskInstance.try_number > 1,
                            )
                        ).one()
                    return row[1] if row[0] == len(lost) else None

                again = wait(running_again, timeout=300)
                times.append(again.timestamp() - killed_at)
        rows.append(
            {
                "scenario": f"{name}: kill -9 to lost tries running",
                "runs": args.repeat,
                "median s": median(times),
                "max s": max(times),
                "target": "≤ 15 s",
            }
        )
    return rows


def fanout(args: argparse.Namespace) -> Rows:
    from sqlalchemy import func, select

    from tailrace.db.models import TaskInstance

    rows = []
    for name in args.brokers:
        calm, hit = [], []
        for _ in range(args.repeat):
            with (
                workspace() as base,
                broker(args, name) as url,
                deployment(base, args, url) as deployed,
            ):
                pk = trigger(deployed, "wide_200")
                state, seconds = wait(lambda pk=pk: _run_state(deployed, pk))
                assert state == "success", state
                calm.append(seconds)

                pk = trigger(deployed, "wide_200")

                def done(pk: int = pk) -> bool:
                    with deployed.engine.connect() as conn:
                        n = conn.scalar(
                            select(func.count()).where(
                                TaskInstance.dag_run_id == pk, TaskInstance.state == "success"
                            )
                        )
                    return (n or 0) >= 60

                wait(done)
                victim, _ = wait(lambda: _busy_worker(deployed))
                deployed.kill_worker(victim)
                deployed.start_worker()
                state, seconds = wait(lambda pk=pk: _run_state(deployed, pk))
                assert state == "success", state
                hit.append(seconds)
        rows.append(
            {
                "scenario": f"{name}: 200 tasks",
                "runs": args.repeat,
                "undisturbed s": median(calm),
                "one worker killed s": median(hit),
                "cost s": median(hit) - median(calm),
                "target": "≤ +20 s",
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    from benchmarks._common import emit, parser

    p = parser(__doc__.splitlines()[0])
    p.add_argument("scenario", choices=["recovery", "fanout"])
    p.set_defaults(database_url="postgresql://postgres@127.0.0.1:5432/postgres")
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/13")
    p.add_argument("--rabbitmq-url", default="amqp://guest:guest@127.0.0.1:5672")
    p.add_argument("--brokers", nargs="+", choices=BROKERS, default=list(BROKERS))
    args = p.parse_args(argv)
    if args.scenario == "recovery":
        emit("Worker kill -9: until its lost tries run again", recovery(args), args.json)
    else:
        emit("200-task fan-out: undisturbed vs one worker killed", fanout(args), args.json)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
