"""A Celery worker killed with kill -9: how long until its tries run again, and what it
costs a 200-task fan-out, on Redis and on RabbitMQ.

    python -m benchmarks.bench_worker_loss recovery [--repeat 3] [--json]
    python -m benchmarks.bench_worker_loss fanout [--repeat 3] [--json]
    python -m benchmarks.bench_worker_loss faults [--repeat 3] [--json]

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
- faults: the fault table of docs/operations.md, on a PostgreSQL server and a Redis (append
  only file on) of the benchmark's own, with two schedulers, two triggerers and two
  workers busy with a stream of 0.3-second tasks and a streaming trigger. For each fault,
  the seconds until the work goes on: a try queued after the fault is running (for a
  triggerer, its stream's next event is stored).
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

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def busy():
    @task
    def step(n):
        time.sleep(0.3)
        return n

    step.expand(n=list(range(5000)))

slow_2()
wide_200()
busy()
"""
STREAM = """
import asyncio
from datetime import datetime
from tailrace import BaseOperator, BaseTrigger, StartTriggerArgs, TriggerEvent, dag


class Ticks(BaseTrigger):
    def serialize(self):
        return (f"{type(self).__module__}.Ticks", {})

    async def run(self):
        i = self.checkpoint["next"] if self.checkpoint else 0
        while True:
            await asyncio.sleep(0.2)
            yield TriggerEvent({"i": i}, checkpoint={"next": i + 1})
            i += 1


class Listen(BaseOperator):
    start_from_trigger = True
    start_trigger_args = StartTriggerArgs(trigger_cls=f"{__name__}.Ticks", trigger_kwargs={})

    def execute(self, context):
        raise RuntimeError("lives in the triggerer")


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def ticking():
    Listen(task_id="listen", max_pending_events=100000)


ticking()
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


class Servers:
    """A PostgreSQL server and a Redis of the benchmark's own, so it may restart them."""

    def __init__(self, base: Path) -> None:
        import shutil
        import tempfile

        self.bindir = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))[-1].parent
        self.data = Path(tempfile.mkdtemp(prefix="tailrace-bench-pg-"))
        shutil.chown(self.data, "postgres", "postgres")
        self.pg_port, self.redis_port = free_port(), free_port()
        self.redis_dir = base / "redis"
        self.redis_dir.mkdir()
        self.redis: subprocess.Popen[bytes] | None = None
        self._as_postgres("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres")
        self.start_postgres()
        self.start_redis()

    def _as_postgres(self, tool: str, *a: str) -> None:
        cmd = ["runuser", "-u", "postgres", "--", str(self.bindir / tool), *a]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)

    def start_postgres(self) -> None:
        options = f"-p {self.pg_port} -c listen_addresses=127.0.0.1 -k {self.data} -c fsync=off"
        self._as_postgres(
            "pg_ctl",
            "-D",
            str(self.data),
            "-o",
            options,
            "-w",
            "-l",
            str(self.data / "log"),
            "start",
        )

    def restart_postgres(self) -> None:
        self._as_postgres("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        self.start_postgres()

    def start_redis(self) -> None:
        self.redis = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.redis_port),
                "--dir",
                str(self.redis_dir),
                "--appendonly",
                "yes",
                "--save",
                "",
            ],
            stdout=subprocess.DEVNULL,
        )
        import redis

        wait(lambda: _pings(redis.Redis(port=self.redis_port)), timeout=30)

    def restart_redis(self) -> None:
        assert self.redis is not None
        self.redis.terminate()  # SIGTERM: Redis writes its append-only file and exits
        self.redis.wait()
        self.start_redis()

    @property
    def database_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.pg_port}/postgres"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    def close(self) -> None:
        import shutil

        if self.redis is not None:
            self.redis.kill()
            self.redis.wait()
        with_suppressed(
            lambda: self._as_postgres(
                "pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop"
            )
        )
        shutil.rmtree(self.data, ignore_errors=True)


def _pings(client: Any) -> bool:
    try:
        return bool(client.ping())
    except Exception:
        return False


def with_suppressed(fn: Any) -> None:
    try:
        fn()
    except Exception as exc:
        print(f"cleanup: {exc}", file=sys.stderr)


def _started_after(deployed: Deployment, at: datetime) -> datetime | None:
    """When a try queued after ``at`` started (None: none has, or the database is away)."""
    from sqlalchemy import func, select

    from tailrace.db.models import TaskInstance

    try:
        with deployed.engine.connect() as conn:
            return conn.scalar(
                select(func.min(TaskInstance.start_date)).where(
                    TaskInstance.queued_at > at, TaskInstance.start_date.is_not(None)
                )
            )
    except Exception:
        return None


def _event_after(deployed: Deployment, at: datetime) -> datetime | None:
    from sqlalchemy import func, select

    from tailrace.db.models import TriggerEvent

    with deployed.engine.connect() as conn:
        return conn.scalar(
            select(func.min(TriggerEvent.created_at)).where(TriggerEvent.created_at > at)
        )


def _stream_holder(deployed: Deployment, triggerers: dict[int, Any]) -> Any:
    from sqlalchemy import select

    from tailrace.db.models import Job, Trigger

    with deployed.engine.connect() as conn:
        pid = conn.scalar(
            select(Job.pid)
            .join(Trigger, Trigger.triggerer_job_id == Job.id)
            .where(Trigger.triggerer_job_id.is_not(None))
        )
    return triggerers.get(pid) if pid is not None else None


FAULTS = ("worker", "scheduler", "triggerer", "broker", "database")


def faults(args: argparse.Namespace) -> Rows:
    times: dict[str, list[float]] = {f: [] for f in FAULTS}
    for _ in range(args.repeat):
        with workspace() as base:
            servers = Servers(base)
            try:
                _fault_round(base, servers, times)
            finally:
                servers.close()
    return [
        {
            "scenario": f"{fault} {_HOW[fault]}",
            "runs": args.repeat,
            "median s": median(times[fault]),
            "max s": max(times[fault]),
        }
        for fault in FAULTS
    ]


def _fault_round(base: Path, servers: Servers, times: dict[str, list[float]]) -> None:
    """One deployment, each fault in turn, the work measured going on after each."""
    from tailrace.db import create_engine
    from tailrace.testing import component_env, kill_component, start_component, stop_components

    folder = base / "dags"
    folder.mkdir()
    (folder / "bench.py").write_text(DAGS)
    (folder / "stream.py").write_text(STREAM)
    port = free_port()
    env = component_env(
        servers.database_url,
        folder,
        executor="celery",
        celery_broker_url=servers.redis_url,
        secret_key=SECRET,
        api_port=port,
        execution_api_url=f"http://127.0.0.1:{port}",
        parallelism=16,
        scheduler_poll_interval=5,
    )
    env["TAILRACE_HOME"] = str(base / "home")
    migrate = [sys.executable, "-m", "tailrace", "db", "migrate"]
    subprocess.run(migrate, env=env, check=True, capture_output=True)
    procs = [start_component(env, "api-server")]
    schedulers = [start_component(env, "scheduler") for _ in range(2)]
    triggerers = {p.pid: p for p in (start_component(env, "triggerer") for _ in range(2))}
    procs += schedulers + list(triggerers.values())
    deployed = Deployment(env, create_engine(servers.database_url))
    try:
        deployed.start_worker()
        deployed.start_worker()
        trigger(deployed, "busy")
        trigger(deployed, "ticking")
        epoch = datetime(2000, 1, 1, tzinfo=UTC)
        wait(lambda: _started_after(deployed, epoch))
        wait(lambda: _event_after(deployed, epoch))

        def measure(fault: str, act: Any, probe: Any = _started_after) -> None:
            time.sleep(2)  # steady state between faults
            at = datetime.now(UTC)
            act()
            seen = wait(lambda: probe(deployed, at), timeout=300)
            times[fault].append((seen - at).total_seconds())

        def kill(proc: subprocess.Popen[str]) -> None:
            kill_component(proc)
            procs.remove(proc)

        victim, _ = wait(lambda: _busy_worker(deployed))
        measure("worker", lambda: (deployed.kill_worker(victim), deployed.start_worker()))
        measure("scheduler", lambda: kill(schedulers[0]))
        holder = wait(lambda: _stream_holder(deployed, triggerers))
        measure("triggerer", lambda: kill(holder), _event_after)
        measure("broker", servers.restart_redis)
        measure("database", servers.restart_postgres)
    finally:
        deployed.engine.dispose()
        stop_components(deployed.workers + procs)


_HOW = {
    "worker": "killed (-9, with its pool)",
    "scheduler": "killed (-9), another runs",
    "triggerer": "killed (-9), another runs",
    "broker": "restarted (Redis, AOF on)",
    "database": "restarted (pg_ctl -m fast)",
}


def main(argv: list[str] | None = None) -> int:
    from benchmarks._common import emit, parser

    p = parser(__doc__.splitlines()[0])
    p.add_argument("scenario", choices=["recovery", "fanout", "faults"])
    p.set_defaults(database_url="postgresql://postgres@127.0.0.1:5432/postgres")
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/13")
    p.add_argument("--rabbitmq-url", default="amqp://guest:guest@127.0.0.1:5672")
    p.add_argument("--brokers", nargs="+", choices=BROKERS, default=list(BROKERS))
    args = p.parse_args(argv)
    if args.scenario == "recovery":
        emit("Worker kill -9: until its lost tries run again", recovery(args), args.json)
    elif args.scenario == "faults":
        emit("Faults: until the work goes on (seconds)", faults(args), args.json)
    else:
        emit("200-task fan-out: undisturbed vs one worker killed", fanout(args), args.json)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
