"""Distributed deployments as real processes: PostgreSQL, a Celery broker, and every
component in its own process group, so a test can ``kill -9`` any of them.

Each test gets its own database (the suite's fixtures), its own broker namespace (a
RabbitMQ virtual host, or a Redis database per xdist worker, emptied before and after),
and its own TAILRACE_HOME: nothing leaks between runs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tailrace.testing import component_env, kill_component, start_component, stop_components

REDIS = "redis://127.0.0.1:6379"
RABBITMQ = "amqp://guest:guest@127.0.0.1:5672"
SECRET = "distributed-tests-secret-key-of-enough-length"
BROKERS = [pytest.param("redis", id="redis"), pytest.param("rabbitmq", id="rabbitmq")]


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def _unavailable(reason: str) -> None:
    if _in_ci():
        pytest.fail(f"the broker is required in CI (CI=true) but unavailable: {reason}")
    pytest.skip(f"broker unavailable: {reason}")


def _reachable(url: str) -> str | None:
    from kombu import Connection

    try:
        with Connection(url, connect_timeout=3) as conn:
            conn.ensure_connection(max_retries=1)
    except Exception as exc:
        return f"{url}: {exc}"
    return None


def _redis_url() -> Iterator[str]:
    import redis

    # One database per xdist worker: tests of one worker run one after another.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw99")
    url = f"{REDIS}/{1 + int(worker.removeprefix('gw') or 0) % 15}"
    if (problem := _reachable(url)) is not None:
        _unavailable(problem)
    client = redis.Redis.from_url(url)
    client.flushdb()
    try:
        yield url
    finally:
        client.flushdb()
        client.close()


def _rabbitmq_url() -> Iterator[str]:
    if (problem := _reachable(f"{RABBITMQ}//")) is not None:
        _unavailable(problem)
    if shutil.which("rabbitmqctl") is None:
        _unavailable("rabbitmqctl is not installed (tests make a virtual host each)")
    vhost = f"tailrace_test_{uuid.uuid4().hex[:12]}"

    def ctl(*args: str) -> None:
        subprocess.run(["rabbitmqctl", *args], check=True, capture_output=True, timeout=60)

    ctl("add_vhost", vhost)
    try:
        ctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        yield f"{RABBITMQ}/{vhost}"
    finally:
        ctl("delete_vhost", vhost)


@pytest.fixture(params=BROKERS)
def broker_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A Celery broker of this machine, in a namespace of the test's own."""
    yield from (_redis_url() if request.param == "redis" else _rabbitmq_url())


@dataclass
class Cluster:
    """Components started by a test, stopped (or killed) by it or at its end."""

    env: dict[str, str]
    logs: Path
    procs: dict[str, subprocess.Popen[str]] = field(default_factory=dict)

    def start(self, name: str, command: str, *args: str) -> subprocess.Popen[str]:
        env = self.env
        if command == "worker":
            # Workers hold no database credentials: give them a database that cannot
            # exist, so any attempt to use one would fail the test.
            env = {**env, "TAILRACE_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}
        proc = start_component(env, command, *args, output=self.logs / f"{name}.log")
        self.procs[name] = proc
        return proc

    def kill(self, name: str) -> None:
        """``kill -9`` the component and every process it started (a lost machine)."""
        kill_component(self.procs.pop(name))

    def stop_all(self) -> None:
        stop_components(list(self.procs.values()))
        self.procs.clear()

    def output(self) -> str:
        """Every component's output so far, for an assertion message."""
        return "\n".join(
            f"===== {p.name}\n{p.read_text()[-4000:]}" for p in sorted(self.logs.glob("*.log"))
        )


@contextlib.contextmanager
def open_cluster(
    database_url: str, broker_url: str, dags_folder: Path, tmp_path: Path
) -> Iterator[Cluster]:
    """The settings every component of a test deployment shares; stops them all after."""
    logs = tmp_path / "component-output"
    logs.mkdir()
    env = component_env(
        database_url,
        dags_folder,
        executor="celery",
        celery_broker_url=broker_url,
        secret_key=SECRET,
        api_port=_free_port(),
        scheduler_poll_interval=1,
        trigger_lease_seconds=4,
        task_heartbeat_timeout=6,
        task_queued_timeout=60,
        worker_processes=2,
    )
    env["TAILRACE_EXECUTION_API_URL"] = f"http://127.0.0.1:{env['TAILRACE_API_PORT']}"
    cluster = Cluster(env, logs)
    try:
        yield cluster
    finally:
        cluster.stop_all()


@pytest.fixture
def cluster(
    database_url: str, broker_url: str, dags_folder: Path, tmp_path: Path
) -> Iterator[Cluster]:
    with open_cluster(database_url, broker_url, dags_folder, tmp_path) as cluster:
        yield cluster


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PrivatePostgres:
    """A PostgreSQL server of the test's own, so the test may restart it."""

    bindir: Path
    data: Path
    port: int

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def ctl(self, *args: str) -> None:
        subprocess.run(
            [
                "runuser",
                "-u",
                "postgres",
                "--",
                str(self.bindir / "pg_ctl"),
                "-D",
                str(self.data),
                *args,
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.data} -c fsync=off"
        self.ctl("-o", options, "-w", "-l", str(self.data / "server.log"), "start")

    def restart(self) -> None:
        """Stop (closing every connection, as a crash or an upgrade would) and start."""
        self.ctl("-m", "fast", "-w", "stop")
        self.start()


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not versions or shutil.which("runuser") is None:
        reason = "PostgreSQL's server binaries (initdb, pg_ctl) or runuser are not installed"
        if _in_ci():
            pytest.fail(f"required in CI (CI=true): {reason}")
        pytest.skip(reason)
    bindir = versions[-1].parent
    # The server runs as the postgres user, which cannot enter pytest's root-only folders.
    data = Path(tempfile.mkdtemp(prefix="tailrace-pg-"))
    shutil.chown(data, "postgres", "postgres")
    server = PrivatePostgres(bindir, data, _free_port())
    subprocess.run(
        [
            "runuser",
            "-u",
            "postgres",
            "--",
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    server.start()
    try:
        yield server
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            server.ctl("-m", "immediate", "-w", "stop")
        shutil.rmtree(data, ignore_errors=True)
