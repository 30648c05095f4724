"""Assembling the runtime: the scheduler, its executor and the DAG parser, in one process.

``tailrace standalone`` and ``tailrace scheduler`` both run a ``SchedulerService``; the
former adds the web UI and the triggerer as those land.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection
from dataclasses import dataclass, field

from sqlalchemy import Engine

from tailrace.config import Settings
from tailrace.dag_processing import SyncReport, parse_and_sync
from tailrace.db import create_engine, upgrade
from tailrace.executors import LocalExecutor
from tailrace.notify import WakeupListener
from tailrace.scheduler import Scheduler, utcnow

log = logging.getLogger(__name__)


def make_scheduler(
    settings: Settings,
    engine: Engine,
    *,
    processes: int | None = None,
    only_runs: Collection[int] | None = None,
) -> Scheduler:
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
    )


@dataclass
class SchedulerService:
    settings: Settings
    engine: Engine = field(init=False)
    scheduler: Scheduler = field(init=False)
    last_parse: SyncReport | None = None

    def __post_init__(self) -> None:
        self.engine = create_engine(self.settings.database_url)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def prepare(self) -> SyncReport:
        """Migrate the database and parse the dags folder once; returns what was found."""
        upgrade(self.engine)
        self.last_parse = parse_and_sync(self.engine, str(self.settings.dags_folder), utcnow())
        return self.last_parse

    def start(self) -> None:
        self.scheduler = make_scheduler(self.settings, self.engine)
        self._listener = WakeupListener(self.settings.home, self.scheduler.wake, "scheduler")
        self._spawn("scheduler", lambda: self.scheduler.run(self._stop))
        self._spawn("dag-parser", self._parse_loop)

    def _spawn(self, name: str, target: object) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)  # type: ignore[arg-type]
        thread.start()
        self._threads.append(thread)

    def _parse_loop(self) -> None:
        while not self._stop.wait(self.settings.dag_parse_interval):
            try:
                self.last_parse = parse_and_sync(
                    self.engine, str(self.settings.dags_folder), utcnow()
                )
                self.scheduler.wake()
            except Exception:
                log.exception("parsing %s failed; will retry", self.settings.dags_folder)

    def stop(self) -> None:
        self._stop.set()
        self.scheduler.wake()
        self._listener.close()
        for thread in self._threads:
            thread.join(timeout=30)
        self.engine.dispose()

    def wait(self) -> None:
        self._stop.wait()
