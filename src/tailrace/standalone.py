"""Assembling the runtime: scheduler (with its workers and DAG parser), triggerer, API.

``tailrace standalone`` runs all three in one process; ``tailrace scheduler`` and ``tailrace
triggerer`` run one each. Components in one process wake each other directly; across
processes they use ``Wakeups`` (a socket on this machine, NOTIFY on PostgreSQL).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import threading
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine

from tailrace.config import EXAMPLE_DAGS_FOLDER, Settings, dag_folders
from tailrace.dag_processing import SyncReport, parse_and_sync, sync_parsed
from tailrace.db import create_engine, upgrade
from tailrace.executors import BaseExecutor, LocalExecutor
from tailrace.notify import Wakeups
from tailrace.scheduler import Scheduler, utcnow
from tailrace.sdk.connections import env_var_name
from tailrace.triggerer import Triggerer
from tailrace.users import Role, create_user, user_exists

if TYPE_CHECKING:
    from tailrace.api import ApiServer

log = logging.getLogger(__name__)

STANDALONE_ADMIN = "admin"
ADMIN_PASSWORD_FILE = "standalone_admin_password.txt"


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
        expansion_batch=settings.iterate_expansion_batch,
    )


def make_triggerer(
    settings: Settings, engine: Engine, *, only_runs: Collection[int] | None = None
) -> Triggerer:
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
    api: ApiServer | None = field(init=False, default=None)
    admin: AdminCredential | None = field(init=False, default=None)
    last_parse: SyncReport | None = None

    def __post_init__(self) -> None:
        self.engine = create_engine(self.settings.database_url)
        self.wakeups = Wakeups(self.settings.home, self.engine)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._resources = contextlib.ExitStack()

    def prepare(self) -> SyncReport | None:
        """Migrate the database; a scheduler also parses its DAG folders once."""
        upgrade(self.engine)
        if self.create_admin:
            self.admin = ensure_standalone_admin(self.engine, self.settings.home)
        if self.scheduler_enabled:
            self.last_parse = self._parse()
        return self.last_parse

    def _parse(self) -> SyncReport:
        """Parse ``dags_folder`` and, with ``load_examples``, the bundled examples; without
        it, examples an earlier start loaded are marked inactive (nothing is imported)."""
        folders = dag_folders(self.settings)
        reports = [parse_and_sync(self.engine, str(folder), utcnow()) for folder in folders]
        if EXAMPLE_DAGS_FOLDER not in folders:
            with self.engine.begin() as conn:
                sync_parsed(conn, str(EXAMPLE_DAGS_FOLDER), [], utcnow())
        return SyncReport(
            dags=sum(r.dags for r in reports),
            new_versions=sum(r.new_versions for r in reports),
            import_errors=sum(r.import_errors for r in reports),
        )

    def start(self) -> None:
        self._start_demo_api()
        if self.scheduler_enabled:
            self.scheduler = make_scheduler(self.settings, self.engine)
            self.scheduler.on_triggers_changed = self._triggers_changed
            self.scheduler.on_acks = self._acks
        if self.triggerer_enabled:
            self.triggerer = make_triggerer(self.settings, self.engine)
            self.triggerer.on_events = self._events_arrived
            self.wakeups.listen("triggerer", self.triggerer.wake)
            self._threads.append(self.triggerer.run_in_thread())
        if self.scheduler is not None:
            scheduler = self.scheduler
            self.wakeups.listen("scheduler", scheduler.wake)
            self.wakeups.listen_for_runs(scheduler.runs_changed)
            self._spawn("scheduler", lambda: scheduler.run(self._stop))
            self._spawn("dag-parser", self._parse_loop)
        if self.api_enabled:
            from tailrace.api import ApiContext, ApiServer

            ctx = ApiContext(self.settings, self.engine, self.wakeups)
            self.api = ApiServer(ctx, self.settings.api_host, self.settings.api_port)
            self.api.start()

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
        self.engine.dispose()
