"""Run DAGs for real — parser process, scheduler, worker processes — from a test."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, select

from tailrace.dag_processing import SyncReport, parse_and_sync
from tailrace.dagrun import run_summary, trigger_dag_run
from tailrace.db.models import DagRun
from tailrace.executors import LocalExecutor
from tailrace.scheduler import Scheduler, utcnow
from tailrace.state import FINISHED_RUN_STATES


class DagHarness:
    """A scheduler with its own worker pool over a dags folder and a migrated database.

    ``run()`` drives the real scheduler loop until the run finishes: nothing is mocked,
    and waiting is on the run's state, not on time.
    """

    def __init__(
        self,
        engine: Engine,
        dags_folder: str | Path,
        *,
        log_folder: str | Path,
        processes: int = 2,
        parallelism: int = 32,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.engine = engine
        self.dags_folder = str(dags_folder)
        self.log_folder = Path(log_folder)
        self.clock = clock
        self.executor = LocalExecutor(processes)
        self.scheduler = Scheduler(
            engine,
            self.executor,
            log_folder=log_folder,
            parallelism=parallelism,
            poll_interval=1.0,
            clock=clock,
        )

    def parse(self) -> SyncReport:
        return parse_and_sync(self.engine, self.dags_folder, self.clock())

    def trigger(
        self,
        dag_id: str,
        conf: Mapping[str, Any] | None = None,
        *,
        logical_date: datetime | None = None,
    ) -> int:
        pk, _ = trigger_dag_run(self.engine, dag_id, dict(conf or {}), logical_date=logical_date)
        self.scheduler.wake()
        return pk

    def is_finished(self, dag_run_id: int) -> bool:
        with self.engine.connect() as conn:
            state = conn.scalar(select(DagRun.state).where(DagRun.id == dag_run_id))
        return state in FINISHED_RUN_STATES

    def run(self, dag_run_id: int, timeout: float = 60.0) -> dict[str, Any]:
        """Drive the scheduler until the run finishes; returns its summary."""
        if not self.scheduler.run_until(lambda: self.is_finished(dag_run_id), timeout):
            raise TimeoutError(
                f"run {dag_run_id} did not finish within {timeout}s: {self.summary(dag_run_id)}"
            )
        return self.summary(dag_run_id)

    def trigger_and_run(
        self, dag_id: str, conf: Mapping[str, Any] | None = None, timeout: float = 60.0
    ) -> dict[str, Any]:
        return self.run(self.trigger(dag_id, conf), timeout)

    def summary(self, dag_run_id: int) -> dict[str, Any]:
        with self.engine.connect() as conn:
            return run_summary(conn, dag_run_id)

    def states(self, dag_run_id: int) -> dict[str, str | None]:
        """``task_id`` (``task_id[i]`` for mapped instances) -> state."""
        out = {}
        for ti in self.summary(dag_run_id)["task_instances"]:
            name = ti["task_id"] + (f"[{ti['map_index']}]" if ti["map_index"] >= 0 else "")
            out[name] = ti["state"]
        return out

    def log(self, dag_run_id: int, task_id: str, map_index: int = -1, try_number: int = 1) -> str:
        """A try's log once complete (a worker finishes writing it just after reporting)."""
        from tailrace.execution import log_path_for
        from tailrace.testing._wait import wait_for

        summary = self.summary(dag_run_id)
        path = log_path_for(
            self.log_folder, summary["dag_id"], summary["run_id"], task_id, map_index, try_number
        )

        def complete() -> str:
            text = path.read_text() if path.exists() else ""
            done = "Task finished:" in text or "died with exit code" in text
            return text if done else ""

        return wait_for(complete, timeout=30)

    def close(self) -> None:
        self.scheduler.stop()

    def __enter__(self) -> DagHarness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
