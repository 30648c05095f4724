"""Assembling the runtime: scheduler (with its workers and DAG parser), triggerer, API.

``tailrace standalone`` runs the scheduler and the triggerer in one process and the API in
``api_processes`` child processes of its own (readers by the hundred must not slow
scheduling); ``tailrace scheduler``, ``tailrace triggerer`` and ``tailrace api-server`` run
one each (an api-server of more than one ``api_processes`` serves from that many children).
Components in one process wake each other directly; across processes they use ``Wakeups``
(a socket on this machine, NOTIFY on PostgreSQL).

A component that can no longer work (the executor gave up, the API child keeps dying)
calls ``Services.fail``: the process stops and exits non-zero rather than heartbeat on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import multiprocessing
import os
import secrets
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, func, select

from tailrace import metrics, tracing
from tailrace.clock import utcnow
from tailrace.config import EXAMPLE_DAGS_FOLDER, Settings, dag_folders
from tailrace.dag_processing import DagFileProcessor, ParseOptions, SyncReport, sync_parsed
from tailrace.dagfiles import prepare_import_path
from tailrace.db import create_engine
from tailrace.db.models import ImportError_
from tailrace.db.revisions import upgrade_if_behind
from tailrace.notify import Wakeups
from tailrace.sdk.connections import env_var_name
from tailrace.tracing.owner import install_state_spans
from tailrace.users import Role, create_user, user_exists

if TYPE_CHECKING:
    # Loaded when started, after the web UI answers: the first parse need not wait.
    from tailrace.api import ApiServer
    from tailrace.scheduler import Scheduler
    from tailrace.triggerer import Triggerer

log = logging.getLogger(__name__)

STANDALONE_ADMIN = "admin"
ADMIN_PASSWORD_FILE = "standalone_admin_password.txt"
# An API child that dies is started again at once; this many deaths in the window is fatal.
API_MAX_RESTARTS = 5
API_RESTART_WINDOW = 60.0
API_START_TIMEOUT = 60.0
# The API child yields the CPU to the scheduler, triggerer and workers when they want it:
# readers by the hundred then wait longer themselves, but cannot slow the runs.
API_NICENESS = 10


@dataclass(frozen=True)
class AdminCredential:
    username: str
    password_file: Path
    created: bool


def ensure_standalone_admin(engine: Engine, home: Path) -> AdminCredential:
    """Create the ``admin`` user with a random password on first start (kept in a file
    only its owner can read); later starts leave it, and any changed password, alone."""
    path = home / ADMIN_PASSWORD_FILE
    with engine.connect() as conn:
        if user_exists(conn, STANDALONE_ADMIN):
            return AdminCredential(STANDALONE_ADMIN, path, created=False)
    password = secrets.token_urlsafe(16)
    # The file first: a password that exists only as a hash would lock the user out.
    home.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(password + "\n")
    os.replace(tmp, path)
    with engine.begin() as conn:
        create_user(conn, STANDALONE_ADMIN, password, Role.ADMIN, utcnow())
    return AdminCredential(STANDALONE_ADMIN, path, created=True)


def make_scheduler(
    settings: Settings,
    engine: Engine,
    *,
    processes: int | None = None,
    only_runs: Collection[int] | None = None,
) -> Scheduler:
    from tailrace.executors import BaseExecutor, LocalExecutor
    from tailrace.scheduler import Scheduler

    # Its local workers import DAG-side modules (they are started with this sys.path).
    prepare_import_path(settings.dags_folder, settings.plugins_folder)
    executor: BaseExecutor
    if settings.executor == "celery":
        from tailrace.executors.celery import CeleryExecutor

        executor = CeleryExecutor(settings)
    else:
        executor = LocalExecutor(
            processes or settings.worker_processes, max_xcom_bytes=settings.max_payload_bytes
        )
    return Scheduler(
        engine,
        executor,
        log_folder=settings.log_folder,
        parallelism=settings.parallelism,
        poll_interval=settings.scheduler_poll_interval,
        only_runs=only_runs,
        default_pool_slots=settings.default_pool_task_slot_count,
        expansion_batch=settings.iterate_expansion_batch,
        stream_retention=settings.stream_retention_seconds,
        redelivery_window=settings.queue_redelivery_window_seconds,
    )


def make_triggerer(
    settings: Settings, engine: Engine, *, only_runs: Collection[int] | None = None
) -> Triggerer:
    from tailrace.triggerer import Triggerer

    # Trigger classpaths in modules beside the DAGs or in plugins resolve.
    prepare_import_path(settings.dags_folder, settings.plugins_folder)
    return Triggerer(
        engine,
        log_folder=str(settings.log_folder),
        capacity=settings.triggerer_capacity,
        lease_seconds=settings.trigger_lease_seconds,
        max_payload_bytes=settings.max_payload_bytes,
        only_runs=only_runs,
    )


@dataclass
class Services:
    """The components this process runs; either or both of scheduler and triggerer."""

    settings: Settings
    scheduler_enabled: bool = True
    triggerer_enabled: bool = True
    api_enabled: bool = False
    # standalone: create an admin with a random password on first start.
    create_admin: bool = False
    # standalone: serve the demo API for the bundled examples that call it.
    demo_api: bool = False
    demo_api_url: str | None = field(init=False, default=None)
    engine: Engine = field(init=False)
    scheduler: Scheduler | None = field(init=False, default=None)
    triggerer: Triggerer | None = field(init=False, default=None)
    api: ApiServer | ApiProcess | None = field(init=False, default=None)
    admin: AdminCredential | None = field(init=False, default=None)
    last_parse: SyncReport | None = None
    # Set by a signal or by ``fail``: whoever runs the services then calls ``stop()``.
    should_stop: threading.Event = field(init=False, default_factory=threading.Event)
    # Why the services could not go on (the process should exit non-zero), if they could not.
    failure: str | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if tracing.configure() and (self.scheduler_enabled or self.api_enabled):
            install_state_spans("scheduler" if self.scheduler_enabled else "api-server")
        self.engine = create_engine(self.settings.database_url)
        self.wakeups = Wakeups(self.settings.home, self.engine)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._resources = contextlib.ExitStack()
        options = ParseOptions.from_settings(self.settings)
        # One processor per folder, each re-importing only what changed in it.
        self.dag_files = [DagFileProcessor(str(f), options) for f in dag_folders(self.settings)]
        self.metrics = metrics.MetricsService(self.settings, self.component, self.engine)

    @property
    def component(self) -> str:
        if self.api_enabled and (self.scheduler_enabled or self.triggerer_enabled):
            return "standalone"
        if self.api_enabled:
            return "api-server"
        return "scheduler" if self.scheduler_enabled else "triggerer"

    def prepare(self) -> SyncReport | None:
        """Migrate the database; a scheduler also parses its DAG folders once.

        The API child starts first: it imports the web framework and builds the app while
        this process migrates and parses, and serves only once ``start()`` says so."""
        self._start_metrics()
        if self._api_in_children:
            self.api = self._api_process()
            self.api.spawn()
        upgrade_if_behind(self.engine)
        if self.create_admin:
            self.admin = ensure_standalone_admin(self.engine, self.settings.home)
        if self.scheduler_enabled:
            self.last_parse = self._parse(first=True)
        return self.last_parse

    def _parse(self, *, first: bool = False) -> SyncReport:
        """Parse ``dags_folder`` and, with ``load_examples``, the bundled examples; without
        it, examples an earlier start loaded are marked inactive (nothing is imported)."""
        began = time.perf_counter()
        reports = [p.parse_and_sync(self.engine, utcnow()) for p in self.dag_files]
        if first and not any(p.folder == str(EXAMPLE_DAGS_FOLDER) for p in self.dag_files):
            with self.engine.begin() as conn:
                sync_parsed(conn, str(EXAMPLE_DAGS_FOLDER), [], utcnow())
        m = metrics.get()
        if m.enabled:
            m.dag_processing_total_parse_time.set(time.perf_counter() - began)
            with self.engine.connect() as conn:
                errors = conn.scalar(select(func.count()).select_from(ImportError_))
                m.dag_processing_import_errors.set(errors or 0)
        return SyncReport(
            dags=sum(r.dags for r in reports),
            new_versions=sum(r.new_versions for r in reports),
            import_errors=sum(r.import_errors for r in reports),
        )

    def _start_metrics(self) -> None:
        # Before any child process starts: they find the directory in the environment.
        if self.metrics.directory is None:
            self.metrics.start()

    def start(self) -> None:
        self._start_metrics()
        # The UI first (its child is ready and waiting): the scheduler's worker processes
        # then import what they need while people can already look around.
        if isinstance(self.api, ApiProcess):
            self.api.serve()
        elif self._api_in_children:
            self.api = self._api_process()
            self.api.start()
        elif self.api_enabled:
            from tailrace.api import ApiContext, ApiServer

            ctx = ApiContext(self.settings, self.engine, self.wakeups)
            self.api = ApiServer(ctx, self.settings.api_host, self.settings.api_port)
            self.api.start()
        self._start_demo_api()
        if self.scheduler_enabled:
            self.scheduler = make_scheduler(self.settings, self.engine)
            self.scheduler.executor.on_fatal = self.fail
            self.scheduler.on_triggers_changed = self._triggers_changed
            self.scheduler.on_acks = self._acks
        if self.triggerer_enabled:
            self.triggerer = make_triggerer(self.settings, self.engine)
            self.triggerer.on_events = self._events_arrived
            self.triggerer.on_asset_events = self._asset_events_arrived
            self.triggerer.on_fatal = self.fail
            self.wakeups.listen("triggerer", self.triggerer.wake)
            self._threads.append(self.triggerer.run_in_thread())
        if self.scheduler is not None:
            scheduler = self.scheduler
            self.wakeups.listen("scheduler", scheduler.wake)
            self.wakeups.listen_for_runs(scheduler.runs_changed)
            self._spawn("scheduler", lambda: scheduler.run(self._stop))
            self._spawn("dag-parser", self._parse_loop)

    @property
    def _api_in_children(self) -> bool:
        """Standalone serves its API from child processes (readers must not slow
        scheduling), and so does an api-server of more than one ``api_processes``."""
        if not self.api_enabled:
            return False
        return self.scheduler_enabled or self.triggerer_enabled or self.settings.api_processes > 1

    def _api_process(self) -> ApiProcess:
        beside_others = self.scheduler_enabled or self.triggerer_enabled
        return ApiProcess(self.settings, self.fail, niceness=API_NICENESS if beside_others else 0)

    def fail(self, reason: str) -> None:
        """Thread-safe: a component cannot go on; stop everything, and exit non-zero."""
        log.critical("%s; stopping", reason)
        if self.failure is None:
            self.failure = reason
        self.should_stop.set()

    def _start_demo_api(self) -> None:
        """Serve the demo API in this process when the bundled examples are parsed and no
        ``demo_api`` connection is set, and name it as that connection (before the workers
        start, so they inherit it)."""
        env_var = env_var_name("demo_api")
        if not self.demo_api or EXAMPLE_DAGS_FOLDER not in dag_folders(self.settings):
            return
        if env_var in os.environ:
            return
        from tailrace.demo_api import DemoApiConfig, running_demo_api

        config = DemoApiConfig(page_size=100, pages=20, latency=0.2)
        self.demo_api_url = self._resources.enter_context(running_demo_api(config))
        os.environ[env_var] = self.demo_api_url
        self._resources.callback(os.environ.pop, env_var, None)

    def _triggers_changed(self) -> None:
        if self.triggerer is not None:
            self.triggerer.wake()
        else:
            self.wakeups.send("triggerer")

    def _acks(self, trigger_ids: set[int]) -> None:
        if self.triggerer is not None:
            self.triggerer.acks_arrived(trigger_ids)
        else:
            self.wakeups.send("triggerer")

    def _events_arrived(self, trigger_ids: set[int]) -> None:
        if self.scheduler is not None:
            self.scheduler.events_arrived(trigger_ids)
        else:
            self.wakeups.send("scheduler")

    def _asset_events_arrived(self) -> None:
        if self.scheduler is not None:
            self.scheduler.asset_events_arrived()
        else:
            self.wakeups.send("scheduler")

    def _spawn(self, name: str, target: object) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)  # type: ignore[arg-type]
        thread.start()
        self._threads.append(thread)

    def _parse_loop(self) -> None:
        while not self._stop.wait(self.settings.dag_parse_interval):
            try:
                self.last_parse = self._parse()
                if self.scheduler is not None:
                    self.scheduler.wake()
            except Exception:
                log.exception("parsing %s failed; will retry", self.settings.dags_folder)

    def stop(self) -> None:
        if self.api is not None:
            self.api.stop()
        self._stop.set()
        if self.scheduler is not None:
            self.scheduler.wake()
        if self.triggerer is not None:
            self.triggerer.stop()
        self.wakeups.close()
        for thread in self._threads:
            thread.join(timeout=30)
        self._resources.close()
        self.metrics.stop()
        self.engine.dispose()


@dataclass
class _ApiChild:
    """One API process and what its parent keeps for it: its listening socket (held
    across its restarts), the process, and the pipe it is told to serve or stop on."""

    sock: socket.socket
    process: BaseProcess | None = None
    conn: Connection | None = None


class ApiProcess:
    """The API in ``settings.api_processes`` child processes, supervised: a child that
    dies is started again on its listening socket (the parent holds them, so the port
    stays and connections wait in the backlog); ``API_MAX_RESTARTS`` deaths (of any of
    them) within ``API_RESTART_WINDOW`` seconds call ``on_fatal``.

    ``niceness``: standalone's children yield the CPU to the scheduler, triggerer and
    workers beside them; an api-server's have nothing to yield to."""

    def __init__(
        self, settings: Settings, on_fatal: Callable[[str], None], *, niceness: int = API_NICENESS
    ) -> None:
        # The child gets plain, picklable settings (``sources`` is a read-only mapping).
        self.settings = dataclasses.replace(settings, sources=dict(settings.sources))
        self.host = settings.api_host
        self.port = settings.api_port
        self.niceness = niceness
        self._on_fatal = on_fatal
        self._ctx = multiprocessing.get_context("spawn")
        self._children: list[_ApiChild] = []
        self._stopping = threading.Event()
        self._deaths: deque[float] = deque()
        self._lock = threading.Lock()
        self._supervisors: list[threading.Thread] = []
        self.restarts = 0

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def pids(self) -> list[int]:
        """The children's process ids."""
        return [c.process.pid for c in self._children if c.process is not None and c.process.pid]

    @property
    def pid(self) -> int | None:
        """The first child's process id."""
        first = self._children[0].process if self._children else None
        return first.pid if first is not None else None

    def start(self) -> None:
        self.spawn()
        self.serve()

    def spawn(self) -> None:
        """Bind the port and start the children, which load the app and wait for serve()."""
        from tailrace.api._listen import bind_group

        count = self.settings.api_processes
        sockets = bind_group(self.host, self.settings.api_port, count)
        self.port = sockets[0].getsockname()[1]
        # Held as children from now on: stop() before serve() tells them to go.
        for i in range(count):
            child = _ApiChild(sockets[i % len(sockets)])
            self._children.append(child)
            child.process, child.conn = self._start_child(child.sock)

    def serve(self) -> None:
        """Have the children spawn() started answer requests; returns once they all do."""
        assert self._children, "spawn() first"
        for child in self._children:
            assert child.process is not None and child.conn is not None
            self._ready(child, child.process, child.conn)
        for i, child in enumerate(self._children):
            supervisor = threading.Thread(
                target=self._supervise, args=(child,), name=f"api-supervisor-{i}", daemon=True
            )
            supervisor.start()
            self._supervisors.append(supervisor)

    def _start_child(self, sock: socket.socket) -> tuple[BaseProcess, Connection]:
        parent, child = self._ctx.Pipe()
        process = self._ctx.Process(
            target=serve_api_child,
            args=(self.settings, sock, child, self.niceness),
            name="tailrace-api",
            daemon=True,
        )
        process.start()
        child.close()
        return process, parent

    def _ready(self, child: _ApiChild, process: BaseProcess, parent: Connection) -> None:
        from tailrace.api.errors import ApiServerError

        ready = False
        with contextlib.suppress(EOFError, OSError):
            parent.send("serve")
            ready = parent.poll(API_START_TIMEOUT) and parent.recv() == "ready"
        if not ready:
            process.kill()
            process.join()
            parent.close()
            raise ApiServerError(
                f"the API process did not start within {API_START_TIMEOUT:.0f}s "
                f"(exit code {process.exitcode}); its error is above"
            )
        if child.conn is not None and child.conn is not parent:
            child.conn.close()
        child.process, child.conn = process, parent

    def _supervise(self, child: _ApiChild) -> None:
        while True:
            process = child.process
            assert process is not None
            process.join()
            if self._stopping.is_set():
                return
            with self._lock:
                now = time.monotonic()
                self._deaths.append(now)
                while self._deaths[0] < now - API_RESTART_WINDOW:
                    self._deaths.popleft()
                deaths = len(self._deaths)
            log.error(
                "the API process (pid %s) died with exit code %s", process.pid, process.exitcode
            )
            if deaths >= API_MAX_RESTARTS:
                self._on_fatal(
                    f"the API process died {deaths} times in {API_RESTART_WINDOW:.0f}s "
                    f"(last exit code {process.exitcode})"
                )
                return
            try:
                self._ready(child, *self._start_child(child.sock))
            except Exception as exc:
                self._on_fatal(f"the API process could not be started again: {exc}")
                return
            with self._lock:
                self.restarts += 1
            assert child.process is not None
            log.warning("the API process was started again (pid %s)", child.process.pid)
            if self._stopping.is_set():  # stop() came meanwhile: it may have missed this one
                self._stop_child(child)
                return

    def stop(self) -> None:
        self._stopping.set()
        # All told first, then each waited for: they wind down together.
        for child in self._children:
            if child.conn is not None:
                with contextlib.suppress(OSError):
                    child.conn.send("stop")
        for child in self._children:
            self._stop_child(child)
        for supervisor in self._supervisors:
            supervisor.join(timeout=60)
        for child in self._children:
            if child.conn is not None:
                child.conn.close()
            child.sock.close()

    def _stop_child(self, child: _ApiChild) -> None:
        process, conn = child.process, child.conn
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.send("stop")
        if process is not None:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
                process.join()


def serve_api_child(
    settings: Settings, sock: socket.socket, conn: Connection, niceness: int = API_NICENESS
) -> None:
    """An API child process: serve on the parent's socket until told to stop, or until
    the parent is gone (its end of the pipe closes)."""
    from tailrace.api import ApiContext, ApiServer

    # Ctrl-C in a terminal, and systemd's SIGTERM, reach every process of the service:
    # the parent decides when this one stops (it says so on the pipe, or goes away).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if niceness:
        with contextlib.suppress(OSError):
            os.nice(niceness)
    from tailrace.metrics import logs

    logs.configure_from_environment("api-server")
    if settings.metrics_enabled:
        # Its parent's directory: clears and marks made here count with the rest.
        metrics.activate_from_environment(transition_hook=True)
    if tracing.configure():
        install_state_spans("api-server")
    engine = create_engine(settings.database_url)
    wakeups = Wakeups(settings.home, engine)
    server = ApiServer(ApiContext(settings, engine, wakeups), settings.api_host, 0)
    # Loaded while the parent migrates and parses; serving waits for its word (or its
    # end: a parent that failed to start says "stop", or is gone).
    try:
        if conn.recv() != "serve":
            return
    except (EOFError, OSError):
        return
    server.start(sock=sock)
    conn.send("ready")
    with contextlib.suppress(EOFError, OSError):
        conn.recv()
    server.stop()
    wakeups.close()
    engine.dispose()
