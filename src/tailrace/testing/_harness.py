"""Run DAGs for real — parser process, scheduler, worker processes — from a test."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, select

from tailrace.clock import utcnow
from tailrace.dag_processing import DagFileProcessor, ParseOptions, SyncReport
from tailrace.dagfiles import prepare_import_path
from tailrace.dagrun import run_summary, trigger_dag_run
from tailrace.db import read_only_engine
from tailrace.db.models import DagRun, TaskInstance, XCom
from tailrace.execution import RunTask, Workload
from tailrace.executors import LocalExecutor
from tailrace.scheduler import Scheduler
from tailrace.serialization import loads
from tailrace.state import FINISHED_RUN_STATES
from tailrace.streams import read_items
from tailrace.transitions import RunTransition, register_run_hook
from tailrace.triggerer import Triggerer

# How often ``DagHarness.run`` reads the run's state when no transition here may have
# ended it: a run marked or cleared from another process is seen this late at most.
ENDED_ELSEWHERE_POLL_SECONDS = 0.05

_STINT_ENDS = ("Task finished:", "Deferring to", "Handled trigger events up to", "died with")


class RunQueries:
    """What a test asks about runs in ``self.engine``: states, XComs, output streams."""

    engine: Engine

    def summary(self, dag_run_id: int) -> dict[str, Any]:
        with self.engine.connect() as conn:
            return run_summary(conn, dag_run_id)

    def task_instance(self, dag_run_id: int, task_id: str, map_index: int = -1) -> Any:
        """The task instance row (all columns) of ``task_id`` in the run."""
        with self.engine.connect() as conn:
            return conn.execute(
                select(TaskInstance).where(
                    TaskInstance.dag_run_id == dag_run_id,
                    TaskInstance.task_id == task_id,
                    TaskInstance.map_index == map_index,
                )
            ).one()

    def xcom(self, dag_run_id: int, task_id: str, key: str = "return_value") -> Any:
        """A task's stored XCom value, decoded (None when there is none)."""
        with self.engine.connect() as conn:
            value = conn.scalar(
                select(XCom.value).where(
                    XCom.dag_run_id == dag_run_id, XCom.task_id == task_id, XCom.key == key
                )
            )
        return None if value is None else loads(value)

    def stream_items(self, dag_run_id: int, task_id: str) -> list[Any]:
        """A task's whole output stream, decoded (fine for tests' small streams)."""
        ti_id = self.task_instance(dag_run_id, task_id).id
        with self.engine.connect() as conn:
            return [loads(v) for v in read_items(conn, ti_id, 0, 1_000_000)]

    def states(self, dag_run_id: int) -> dict[str, str | None]:
        """``task_id`` (``task_id[i]`` for mapped instances) -> state."""
        out = {}
        for ti in self.summary(dag_run_id)["task_instances"]:
            name = ti["task_id"] + (f"[{ti['map_index']}]" if ti["map_index"] >= 0 else "")
            out[name] = ti["state"]
        return out

    def runs(self, dag_id: str) -> list[int]:
        """The ids of ``dag_id``'s runs, oldest logical date first."""
        with self.engine.connect() as conn:
            return list(
                conn.scalars(
                    select(DagRun.id)
                    .where(DagRun.dag_id == dag_id)
                    .order_by(DagRun.logical_date, DagRun.id)
                )
            )

    # -- assertions: on failure they show the run, its instances and their errors --------

    def assert_run_state(self, dag_run_id: int, state: str) -> None:
        summary = self.summary(dag_run_id)
        if summary["state"] != state:
            raise AssertionError(
                f"run {summary['run_id']} of {summary['dag_id']} is {summary['state']!r}, "
                f"expected {state!r}\n{_describe(summary)}"
            )

    def assert_task_states(self, dag_run_id: int, expected: Mapping[str, str | None]) -> None:
        """Each named instance (``task_id``, or ``task_id[i]`` mapped) is in its state;
        instances not named are not checked."""
        states = self.states(dag_run_id)
        wrong = {k: states.get(k, "<no such instance>") for k, v in expected.items()}
        wrong = {k: v for k, v in wrong.items() if v != expected[k]}
        if wrong:
            shown = ", ".join(f"{k} is {v!r} (expected {expected[k]!r})" for k, v in wrong.items())
            raise AssertionError(f"{shown}\n{_describe(self.summary(dag_run_id))}")

    def assert_xcom(
        self, dag_run_id: int, task_id: str, expected: Any, key: str = "return_value"
    ) -> None:
        value = self.xcom(dag_run_id, task_id, key)
        if value != expected:
            raise AssertionError(f"XCom {key!r} of {task_id!r} is {value!r}, expected {expected!r}")


def _describe(summary: Mapping[str, Any]) -> str:
    lines = []
    for ti in summary["task_instances"]:
        name = ti["task_id"] + (f"[{ti['map_index']}]" if ti["map_index"] >= 0 else "")
        line = f"  {name}: {ti['state']} (try {ti['try_number']})"
        if ti.get("error"):
            line += "\n    " + str(ti["error"]).strip().replace("\n", "\n    ")
        lines.append(line)
    return "\n".join(lines)


class DagHarness(RunQueries):
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
        with_triggerer: bool = True,
        triggerer_lease: float = 30.0,
        parse_options: ParseOptions | None = None,
    ) -> None:
        self.engine = engine
        self._reader = read_only_engine(engine)
        self.dags_folder = str(dags_folder)
        self.processor = DagFileProcessor(self.dags_folder, parse_options)
        # This process runs the triggerer and starts the workers: DAG-side modules import.
        prepare_import_path(self.dags_folder, self.processor.options.plugins_folder)
        self.log_folder = Path(log_folder)
        self.clock = clock
        self.executor = LocalExecutor(processes)
        # Every workload handed to a worker, by task instance id: proof of "no worker".
        self.dispatched: list[int] = []
        executor_queue = self.executor.queue_workloads

        def record(workloads: Sequence[Workload], *, backlog: bool = False) -> None:
            self.dispatched.extend(w.ti_id for w in workloads if isinstance(w, RunTask))
            executor_queue(workloads, backlog=backlog)

        self.executor.queue_workloads = record  # type: ignore[method-assign]
        self.scheduler = Scheduler(
            engine,
            self.executor,
            log_folder=log_folder,
            parallelism=parallelism,
            poll_interval=1.0,
            clock=clock,
        )

        self.triggerer: Triggerer | None = None
        if with_triggerer:
            self.triggerer = Triggerer(
                engine, log_folder=str(log_folder), lease_seconds=triggerer_lease, clock=clock
            )
            self.triggerer.on_events = self.scheduler.events_arrived
            self.triggerer.on_asset_events = self.scheduler.asset_events_arrived
            self.scheduler.on_triggers_changed = self.triggerer.wake
            self.scheduler.on_acks = self.triggerer.acks_arrived
        self._triggerer_thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the worker pool and the triggerer (``run()`` does this when needed)."""
        self.scheduler.start()
        if self.triggerer is not None and self._triggerer_thread is None:
            self._triggerer_thread = self.triggerer.run_in_thread()

    @contextlib.contextmanager
    def running(self) -> Iterator[DagHarness]:
        """Run the scheduler loop on a thread for the block: for tests that act while runs
        are in flight (kill a process, clear a task) and wait on the database meanwhile."""
        self.start()
        stop = threading.Event()
        loop = threading.Thread(target=self.scheduler.run, args=(stop,), daemon=True)
        loop.start()
        try:
            yield self
        finally:
            stop.set()
            self.scheduler.wake()
            loop.join(timeout=30)

    def parse(self) -> SyncReport:
        return self.processor.parse_and_sync(self.engine, self.clock())

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
        # Asked after every step: a read must not queue for SQLite's write turn (ADR 0002).
        with self._reader.connect() as conn:
            state = conn.scalar(select(DagRun.state).where(DagRun.id == dag_run_id))
        return state in FINISHED_RUN_STATES

    def run(self, dag_run_id: int, timeout: float = 60.0) -> dict[str, Any]:
        """Drive the scheduler until the run finishes; returns its summary.

        The run's state is read after a step only when a run transition in this process
        may have ended it, or once every ``ENDED_ELSEWHERE_POLL_SECONDS`` (a writer in
        another process): a read after every step would sit in each hop of a chain.
        """
        self.start()
        may_have_ended = threading.Event()

        def note(conn: Connection, transitions: Sequence[RunTransition]) -> None:
            if any(t.dag_run_id == dag_run_id and t.kind != "start" for t in transitions):
                may_have_ended.set()

        next_look = 0.0

        def done() -> bool:
            nonlocal next_look
            if not may_have_ended.is_set() and time.monotonic() < next_look:
                return False
            may_have_ended.clear()
            next_look = time.monotonic() + ENDED_ELSEWHERE_POLL_SECONDS
            return self.is_finished(dag_run_id)

        unregister = register_run_hook(note)
        try:
            finished = self.scheduler.run_until(done, timeout)
        finally:
            unregister()
        if not finished:
            raise TimeoutError(
                f"run {dag_run_id} did not finish within {timeout}s: {self.summary(dag_run_id)}"
            )
        return self.summary(dag_run_id)

    def dag_callbacks(self, dag_run_id: int, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Drive the scheduler until the run's callbacks (its DAG's, and its tasks' for tries
        that ended without a worker) have been run by a worker;
        returns them (kind, reason, state, error) in the order they were recorded."""
        from tailrace.db.models import DagCallback

        def rows() -> list[dict[str, Any]]:
            with self.engine.connect() as conn:
                found = conn.execute(
                    select(
                        DagCallback.kind, DagCallback.reason, DagCallback.state, DagCallback.error
                    )
                    .where(DagCallback.dag_run_id == dag_run_id)
                    .order_by(DagCallback.id)
                ).all()
            return [r._asdict() for r in found]

        def done() -> bool:
            return all(r["state"] in ("success", "failed") for r in rows())

        self.start()
        if not self.scheduler.run_until(done, timeout):
            raise TimeoutError(f"the DAG callbacks of run {dag_run_id} did not end: {rows()}")
        return rows()

    def trigger_and_run(
        self, dag_id: str, conf: Mapping[str, Any] | None = None, timeout: float = 60.0
    ) -> dict[str, Any]:
        return self.run(self.trigger(dag_id, conf), timeout)

    def log(self, dag_run_id: int, task_id: str, map_index: int = -1, try_number: int = 1) -> str:
        """A try's log once complete (a worker finishes writing it just after reporting)."""
        from tailrace.execution import log_path_for
        from tailrace.testing._wait import wait_for

        summary = self.summary(dag_run_id)
        path = log_path_for(
            self.log_folder, summary["dag_id"], summary["run_id"], task_id, map_index, try_number
        )

        def complete() -> str:
            # Every stint on a worker ("Running ...") has ended: finished, deferred (or a
            # batch of trigger events handled, waiting for more) or died.
            text = path.read_text() if path.exists() else ""
            began = text.count("} INFO - Running ") + text.count("} INFO - Resuming (")
            ended = sum(text.count(m) for m in _STINT_ENDS)
            return text if text and began <= ended else ""

        return wait_for(complete, timeout=30)

    def close(self) -> None:
        self.scheduler.stop()
        if self.triggerer is not None and self._triggerer_thread is not None:
            self.triggerer.stop()
            self._triggerer_thread.join(timeout=30)

    def __enter__(self) -> DagHarness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
