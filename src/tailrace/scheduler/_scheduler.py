"""The scheduler loop: event-driven, one writer, batched transactions.

Each step drains the inbox (executor events, wake-ups), applies every result in one
transaction, creates due runs, re-plans only the runs something happened in, and hands
ready task instances to the executor. It sleeps only until the next timer (a retry or
a scheduled run) or the safety-net poll, and wakes at once when an event arrives.
User code never runs here: everything comes from serialized DAGs and the database.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime
from pathlib import Path

import msgspec
from sqlalchemy import Connection, Engine, bindparam, func, select, update

from tailrace import jobs, transitions
from tailrace.clock import Clock, utcnow
from tailrace.db import is_postgres, read_only_engine
from tailrace.db.models import (
    Dag,
    DagRun,
    TaskInstance,
    Trigger,
)
from tailrace.execution import (
    DagRunPayload,
    RunTask,
    TaskFinished,
    TaskStarted,
    log_path_for,
)
from tailrace.execution.protocol import (
    WorkerReply,
    WorkerRequest,
)
from tailrace.executors.base import BaseExecutor, ExecutorEvent
from tailrace.scheduler._iterate import instance_count
from tailrace.scheduler._orphans import fail_silent_remote_tries, reset_orphans
from tailrace.scheduler._planner import Hidden, TIRow, plan_run
from tailrace.scheduler._runs import create_scheduled_runs, start_queued_runs
from tailrace.scheduler._triggers import (
    consume_trigger_events,
    earliest_deferral_deadline,
    expire_deferrals,
    pending_events,
    start_from_trigger,
)
from tailrace.scheduler.reports import Applied, apply_executor_events
from tailrace.scheduler.versions import DagVersions
from tailrace.scheduler.worker_requests import answer_worker_request
from tailrace.serialization import SerializedDag, SerializedTask
from tailrace.state import ACTIVE_TI_STATES, FINISHED_TI_STATES, DagRunState
from tailrace.state import TaskInstanceState as TIS

log = logging.getLogger(__name__)

_WAKE = object()
_EVENTS = object()


class _RunsChanged(msgspec.Struct, frozen=True):
    run_ids: frozenset[int]


START_COALESCE_SECONDS = 0.01
RUNS_COALESCE_SECONDS = 0.005
STEP_RETRY_SECONDS = 1.0
# A run another scheduler was planning is looked at again this soon.
CONTENDED_RETRY_SECONDS = 0.02
_CHUNK = 500
# Instances an expansion creates before the scheduler first refreshes PostgreSQL's planner
# statistics (then again each time the count doubles).
ANALYZE_AFTER = 20_000


def _chunks(ids: Sequence[int]) -> Iterable[Sequence[int]]:
    for i in range(0, len(ids), _CHUNK):
        yield ids[i : i + _CHUNK]


# Statements on the hot path are built once: constructing them costs more than running them.
_RUNNING_RUNS = select(
    DagRun.id,
    DagRun.dag_id,
    DagRun.run_id,
    DagRun.dag_version_id,
    DagRun.run_type,
    DagRun.logical_date,
    DagRun.data_interval_start,
    DagRun.data_interval_end,
    DagRun.start_date,
    DagRun.conf,
).where(DagRun.id.in_(bindparam("ids", expanding=True)), DagRun.state == DagRunState.RUNNING)
# Several schedulers: a pass plans the runs it could lock; another scheduler planning a
# run holds it (PostgreSQL; SQLite has one writer and ignores the clause).
_LOCK_RUNNING_RUNS = _RUNNING_RUNS.with_for_update(skip_locked=True, key_share=True)
_STILL_RUNNING = select(DagRun.id).where(
    DagRun.id.in_(bindparam("ids", expanding=True)), DagRun.state == DagRunState.RUNNING
)
_TI_COLUMNS = (
    TaskInstance.dag_run_id,
    TaskInstance.id,
    TaskInstance.task_id,
    TaskInstance.map_index,
    TaskInstance.state,
    TaskInstance.try_number,
    TaskInstance.max_tries,
    TaskInstance.next_retry_at,
    TaskInstance.next_method,
)
_FINISHED = sorted(FINISHED_TI_STATES)
# A run's unmapped instances and placeholders, and per mapped task the instances that have
# started (_STARTED). Unstarted ones are read a page per task (_UNSTARTED), finished ones
# only summarised (_FINISHED_EXISTS while the task runs, _FINISHED_MAPPED counts once it
# is complete): a run with a million items costs a pass no more than one with ten.
_UNMAPPED_TIS = select(*_TI_COLUMNS).where(
    TaskInstance.dag_run_id.in_(bindparam("ids", expanding=True)), TaskInstance.map_index == -1
)
_STARTED = select(*_TI_COLUMNS).where(
    TaskInstance.dag_run_id == bindparam("run"),
    TaskInstance.task_id == bindparam("task"),
    TaskInstance.map_index >= 0,
    TaskInstance.state.in_(sorted(set(TIS) - FINISHED_TI_STATES)),
)
_UNSTARTED = (
    select(*_TI_COLUMNS)
    .where(
        TaskInstance.dag_run_id == bindparam("run"),
        TaskInstance.task_id == bindparam("task"),
        TaskInstance.map_index >= 0,
        TaskInstance.state.is_(None),
    )
    .order_by(TaskInstance.map_index)
    .limit(bindparam("limit"))
)
_FINISHED_MAPPED = (
    select(TaskInstance.state, func.count())
    .where(
        TaskInstance.dag_run_id == bindparam("run"),
        TaskInstance.task_id == bindparam("task"),
        TaskInstance.state.in_(_FINISHED),
        TaskInstance.map_index >= 0,
    )
    .group_by(TaskInstance.state)
)
# While a mapped task runs, trigger rules need only know which outcomes exist so far.
_FINISHED_EXISTS = {
    state: select(TaskInstance.id)
    .where(
        TaskInstance.dag_run_id == bindparam("run"),
        TaskInstance.task_id == bindparam("task"),
        TaskInstance.state == state,
        TaskInstance.map_index >= 0,
    )
    .limit(1)
    for state in _FINISHED
}
_BUSY = (
    select(func.count())
    .select_from(TaskInstance)
    .where(TaskInstance.state.in_([TIS.QUEUED, TIS.RUNNING]))
)


class _Run(msgspec.Struct):
    id: int
    dag_id: str
    run_id: str
    dag_version_id: int
    run_type: str
    logical_date: datetime | None
    data_interval_start: datetime | None
    data_interval_end: datetime | None
    start_date: datetime | None
    conf: dict  # type: ignore[type-arg]


class Scheduler:
    def __init__(
        self,
        engine: Engine,
        executor: BaseExecutor,
        *,
        log_folder: str | Path,
        parallelism: int = 32,
        poll_interval: float = 5.0,
        clock: Clock = utcnow,
        only_runs: Collection[int] | None = None,
        expansion_batch: int = 5000,
    ) -> None:
        self.engine = engine
        # Workers' XCom reads must not take SQLite's write lock (ADR 0002).
        self._reader = read_only_engine(engine)
        self.executor = executor
        self.log_folder = str(log_folder)
        self.parallelism = parallelism
        self.poll_interval = poll_interval
        self.clock = clock
        # `dags test`: look after these runs only, and create no scheduled runs.
        self.only_runs = set(only_runs) if only_runs is not None else None
        self.inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._versions = DagVersions()
        self._dirty: set[int] = set()
        self._waiting_for_slots: set[int] = set()
        self._next_full_scan = 0.0
        self._next_timer: datetime | None = None
        self._started = False
        self._runs_finished = False
        self.steps = 0  # scheduler passes, for benchmarks and the curious
        self.expanded = 0  # iterate instances created
        self._expanded_at_analyze = 0
        # How long recent passes took (waiting excluded), for benchmarks and the curious.
        self.pass_seconds: deque[float] = deque(maxlen=100_000)
        # Per pass and mapped task: unstarted instances read, iterate instances created.
        self.page = max(64, 2 * parallelism)
        self.expansion_batch = max(1, expansion_batch)
        self._more_unstarted: set[int] = set()
        # Runs another scheduler held while this one wanted to plan them.
        self._contended: set[int] = set()
        # Instances finished by remote workers (reported through the api-server).
        self._finished_elsewhere = False
        # Reports whose transaction failed (the database went away): applied next step.
        self._unapplied: list[ExecutorEvent] = []
        self._complete_counts: dict[tuple[int, str], dict[str, int]] = {}
        self.job_id = 0
        self._next_heartbeat = 0.0
        self._triggers_changed = False
        self._acked_triggers: set[int] = set()
        # A partial batch of trigger events falls due (max_batch_latency): look then.
        self._batch_deadline: datetime | None = None
        # Called with triggers whose events were acknowledged (unpauses backpressure).
        self.on_acks: Callable[[set[int]], None] = lambda trigger_ids: None
        self._events_lock = threading.Lock()
        self._triggers_with_events: set[int] = set()
        # Held by iterate consumers downstream: looked at again when instances finish.
        self._held_triggers: set[int] = set()
        # Called after a step that created or cancelled triggers (wakes the triggerer).
        self.on_triggers_changed: Callable[[], None] = lambda: None

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        if not self._started:
            with self.engine.begin() as conn:
                self.job_id = jobs.register(conn, "scheduler", self.clock())
            self._next_heartbeat = time.monotonic() + self.poll_interval
            self.executor.start(self.inbox.put, self._read_xcoms)
            self._started = True

    def stop(self) -> None:
        if self._started:
            self.executor.stop()
            with self.engine.begin() as conn:
                jobs.finish(conn, self.job_id)
            self._started = False

    def wake(self) -> None:
        self.inbox.put(_WAKE)

    def runs_changed(self, run_ids: Collection[int]) -> None:
        """Thread-safe: instances of these runs changed elsewhere (a remote worker's report
        applied by the api-server): plan them."""
        self.inbox.put(_RunsChanged(frozenset(run_ids)))

    def events_arrived(self, trigger_ids: Collection[int]) -> None:
        """Thread-safe: these triggers have new durable events (from an in-process triggerer)."""
        with self._events_lock:
            self._triggers_with_events.update(trigger_ids)
        self.inbox.put(_EVENTS)

    def run(self, stop: threading.Event) -> None:
        self.start()
        try:
            while not stop.is_set():
                try:
                    self.step(self._sleep_budget())
                except Exception:
                    # The step's transaction rolled back: nothing half-applied. A database
                    # that went away comes back; a bug must not stop every other DAG.
                    log.exception("scheduler step failed; retrying in %.0fs", STEP_RETRY_SECONDS)
                    stop.wait(STEP_RETRY_SECONDS)
                    self._dirty.clear()
                    self._next_full_scan = 0.0  # look at everything again
        finally:
            self.stop()

    def run_until(self, done: Callable[[], bool], timeout: float = 600.0) -> bool:
        """Step until ``done()`` holds (checked after each step); the test/CLI seam."""
        self.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.step(min(self._sleep_budget(), max(0.0, deadline - time.monotonic())))
            if done():
                return True
        return False

    def _sleep_budget(self) -> float:
        budget = self.poll_interval
        for timer in (self._next_timer, self._batch_deadline):
            if timer is not None:
                budget = min(budget, (timer - self.clock()).total_seconds())
        return max(0.0, budget)

    # -- one step ----------------------------------------------------------------------

    def _collect(self, timeout: float) -> tuple[list[ExecutorEvent], bool]:
        """Wait for the first item (unless work is pending), then drain the inbox."""
        items: list[object] = []
        if self._contended:
            timeout = min(timeout, CONTENDED_RETRY_SECONDS)
        if not self._dirty:
            with contextlib.suppress(queue.Empty):
                items.append(
                    self.inbox.get(timeout=timeout) if timeout > 0 else self.inbox.get_nowait()
                )
        self._drain(items)
        pause = self._coalesce_for(items)
        if pause:
            with contextlib.suppress(queue.Empty):
                items.append(self.inbox.get(timeout=pause))
                self._drain(items)
        for item in items:
            if isinstance(item, _RunsChanged):
                self._dirty |= item.run_ids
                self._finished_elsewhere = True
        events: list[ExecutorEvent] = [
            i  # type: ignore[misc]
            for i in items
            if i is not _WAKE and i is not _EVENTS and not isinstance(i, _RunsChanged)
        ]
        return events, any(i is _WAKE for i in items)

    def _drain(self, items: list[object]) -> None:
        while True:
            try:
                items.append(self.inbox.get_nowait())
            except queue.Empty:
                return

    @staticmethod
    def _coalesce_for(items: list[object]) -> float:
        """How long to wait for more before stepping, so one transaction takes more:
        a short task's "finished" follows its "started" within milliseconds; remote
        workers' results arrive one notice each."""
        if not items or any(i is _WAKE for i in items):
            return 0.0
        if all(isinstance(i, TaskStarted) for i in items):
            return START_COALESCE_SECONDS
        if all(isinstance(i, _RunsChanged) for i in items):
            return RUNS_COALESCE_SECONDS
        return 0.0

    def step(self, timeout: float = 0.0) -> None:
        events, woken = self._collect(timeout)
        events = [*self._unapplied, *events]
        self._unapplied = []
        self._dirty |= self._contended
        self._contended.clear()
        began = time.perf_counter()
        self.steps += 1
        now = self.clock()
        full_scan = time.monotonic() >= self._next_full_scan
        if full_scan:
            self._next_full_scan = time.monotonic() + self.poll_interval
        timer_fired = self._next_timer is not None and self._next_timer <= now
        if self._batch_deadline is not None and self._batch_deadline <= now:
            self._batch_deadline = None
            timer_fired = True
        # Changes made elsewhere (a new run, an unpause, a parse) come with a wake-up; the
        # hot path — a task finished, its downstream starts — skips these queries.
        look_around = full_scan or woken or timer_fired
        retries = any(isinstance(e, TaskFinished) and e.outcome == "failed" for e in events)
        self._runs_finished = False
        self._triggers_changed = False
        try:
            with self.engine.begin() as conn:
                self._apply(
                    conn,
                    events,
                    now,
                    full_scan=full_scan,
                    look_around=look_around,
                    deadlines_due=full_scan or timer_fired,
                )
                # Acknowledging events locked trigger rows the triggerer writes to: release
                # them before planning (an expansion can take a while) rather than after.
                split = bool(self._acked_triggers)
                if not split:
                    workloads = self._plan(
                        conn, now, look_around=look_around, full_scan=full_scan, retries=retries
                    )
        except Exception:
            # Nothing of it was committed: workers' reports must not be lost with it.
            self._unapplied = events
            raise
        if split:
            with self.engine.begin() as conn:
                workloads = self._plan(
                    conn, now, look_around=look_around, full_scan=full_scan, retries=retries
                )
        if workloads:
            self.executor.queue_workloads(workloads)
        if self._triggers_changed:
            self.on_triggers_changed()
        if self._acked_triggers:
            acked, self._acked_triggers = self._acked_triggers, set()
            self.on_acks(acked)
        self.pass_seconds.append(time.perf_counter() - began)

    def _apply(
        self,
        conn: Connection,
        events: list[ExecutorEvent],
        now: datetime,
        *,
        full_scan: bool,
        look_around: bool,
        deadlines_due: bool,
    ) -> None:
        """Reports from workers, orphans, the heartbeat, and trigger events."""
        if events:
            self._follow(apply_executor_events(conn, events, self._task_for, now))
            self._dirty |= self._waiting_for_slots
        if full_scan and self.executor.remote:
            self._dirty |= fail_silent_remote_tries(
                conn,
                now,
                self.only_runs,
                self._task_for,
                heartbeat_timeout=self.executor.heartbeat_timeout,
                queued_timeout=self.executor.queued_timeout,
            )
        elif full_scan:
            self._dirty |= reset_orphans(
                conn, self.job_id, now, self.only_runs, self._task_for, self.poll_interval
            )
        if time.monotonic() >= self._next_heartbeat:
            self._next_heartbeat = time.monotonic() + self.poll_interval
            jobs.heartbeat(conn, self.job_id, now)
        finished = self._finished_elsewhere or any(isinstance(e, TaskFinished) for e in events)
        self._finished_elsewhere = False
        self._handle_trigger_events(conn, now, look_around, deadlines_due, finished)

    def _plan(
        self, conn: Connection, now: datetime, *, look_around: bool, full_scan: bool, retries: bool
    ) -> list[RunTask]:
        """New runs, then the instances of changed runs: finished, expanded or queued."""
        if look_around:
            self._dirty |= self._due_runs(conn, now, all_running=full_scan)
            self._create_scheduled_runs(conn, now)
            self._start_queued_runs(conn)
        workloads = self._schedule(conn, now) if self._dirty else []
        if self._runs_finished:
            # A finished run frees a max_active_runs slot for queued and due runs.
            self._create_scheduled_runs(conn, now)
            self._start_queued_runs(conn)
        if look_around or retries or self._runs_finished or self._triggers_changed:
            self._next_timer = self._earliest_timer(conn)
        return workloads

    def _handle_trigger_events(
        self,
        conn: Connection,
        now: datetime,
        look_around: bool,
        deadlines_due: bool,
        tasks_finished: bool,
    ) -> None:
        with self._events_lock:
            with_events, self._triggers_with_events = self._triggers_with_events, set()
        if tasks_finished or look_around:
            # Finished instances may make room for a stream their task iterates over.
            with_events |= self._held_triggers
            self._held_triggers = set()
        if look_around or with_events:
            # After a wake-up anything may have happened: look at every deferred instance.
            applied, deadline = consume_trigger_events(
                conn, self._task_for, now, None if look_around else with_events
            )
            self._follow(applied)
            if deadline is not None:
                self._batch_deadline = min(deadline, self._batch_deadline or deadline)
        if deadlines_due:
            self._follow(expire_deferrals(conn, self._task_for, now))

    def _follow(self, applied: Applied) -> None:
        self._held_triggers |= applied.held_triggers
        self._dirty |= applied.runs
        self._triggers_changed |= applied.triggers_changed
        self._acked_triggers |= applied.acked_triggers

    # -- runs --------------------------------------------------------------------------

    def _version(self, conn: Connection, version_id: int) -> tuple[SerializedDag, str]:
        return self._versions.get(conn, version_id)

    def _task_for(self, conn: Connection, version_id: int, task_id: str) -> SerializedTask:
        return self._versions.task(conn, version_id, task_id)

    def _due_runs(self, conn: Connection, now: datetime, *, all_running: bool) -> set[int]:
        """Runs a timer fired for: retries due, run timeouts; or every running run."""
        # Woken: a clear or mark elsewhere may have reopened a complete mapped task.
        self._complete_counts.clear()
        if all_running:
            q = select(DagRun.id).where(DagRun.state == DagRunState.RUNNING)
        else:
            q = (
                select(TaskInstance.dag_run_id)
                .where(TaskInstance.state == TIS.UP_FOR_RETRY, TaskInstance.next_retry_at <= now)
                .distinct()
            )
        found = set(conn.scalars(q))
        return found if self.only_runs is None else found & self.only_runs

    def _earliest_timer(self, conn: Connection) -> datetime | None:
        retry = conn.scalar(
            select(func.min(TaskInstance.next_retry_at)).where(
                TaskInstance.state == TIS.UP_FOR_RETRY
            )
        )
        # A DAG whose next run is overdue is held back by max_active_runs: a finishing
        # run, not a timer, releases it, so only future moments count here.
        run = conn.scalar(
            select(func.min(Dag.next_dagrun)).where(
                Dag.is_paused.is_(False), Dag.is_active.is_(True), Dag.next_dagrun > self.clock()
            )
        )
        timers = [t for t in (retry, run, earliest_deferral_deadline(conn)) if t is not None]
        return min(timers) if timers else None

    def _create_scheduled_runs(self, conn: Connection, now: datetime) -> None:
        if self.only_runs is None:
            create_scheduled_runs(conn, now, lambda v: self._version(conn, v)[0])

    def _start_queued_runs(self, conn: Connection) -> None:
        self._dirty |= start_queued_runs(conn, self.clock(), self.only_runs)

    # -- task instances ----------------------------------------------------------------

    def _load(
        self, conn: Connection, run_ids: list[int]
    ) -> tuple[dict[int, _Run], dict[int, list[TIRow]], dict[int, dict[str, Hidden]]]:
        """Running runs, the instances a pass needs, and a summary of the rest."""
        runs: dict[int, _Run] = {}
        tis: dict[int, list[TIRow]] = defaultdict(list)
        hidden: dict[int, dict[str, Hidden]] = defaultdict(dict)
        for chunk in _chunks(run_ids):
            for r in conn.execute(_LOCK_RUNNING_RUNS, {"ids": chunk}):
                runs[r.id] = _Run(*r)
            missing = [i for i in chunk if i not in runs]
            if missing and is_postgres(conn):
                self._contended.update(conn.scalars(_STILL_RUNNING, {"ids": missing}))
        run_ids = [i for i in run_ids if i in runs]
        for chunk in _chunks(run_ids):
            for t in conn.execute(_UNMAPPED_TIS, {"ids": chunk}):
                tis[t.dag_run_id].append(TIRow(*t[1:]))
        for run in runs.values():
            dag, _ = self._version(conn, run.dag_version_id)
            # Placeholders still to expand (or expanding): their task is not complete.
            expanding = {r.task_id for r in tis[run.id] if r.state not in FINISHED_TI_STATES}
            for task in dag.tasks:
                if not task.is_mapped:
                    continue
                key = {"run": run.id, "task": task.task_id}
                started = conn.execute(_STARTED, key).all()
                tis[run.id].extend(TIRow(*t[1:]) for t in started)
                page = conn.execute(_UNSTARTED, {**key, "limit": self.page + 1}).all()
                tis[run.id].extend(TIRow(*t[1:]) for t in page[: self.page])
                complete = not (started or page or task.task_id in expanding)
                hidden[run.id][task.task_id] = Hidden(
                    self._finished_counts(conn, run.id, task.task_id, complete=complete),
                    more=len(page) > self.page,
                )
        return runs, tis, hidden

    def _finished_counts(
        self, conn: Connection, run_id: int, task_id: str, *, complete: bool
    ) -> dict[str, int]:
        """A mapped task's finished instances by state: exact once the task is complete
        (cached until something outside the scheduler may change it), else 1 for each
        outcome that exists — all a trigger rule needs while instances are unfinished."""
        key = {"run": run_id, "task": task_id}
        if not complete:
            return {s: 1 for s, q in _FINISHED_EXISTS.items() if conn.scalar(q, key) is not None}
        counts = self._complete_counts.get((run_id, task_id))
        if counts is None:
            counts = {str(s): n for s, n in conn.execute(_FINISHED_MAPPED, key)}
            self._complete_counts[(run_id, task_id)] = counts
        return counts

    def _schedule(self, conn: Connection, now: datetime) -> list[RunTask]:
        from tailrace.scheduler._expand import expand_mapped

        runs, tis, hidden = self._load(conn, sorted(self._dirty))
        self._dirty.clear()
        self._waiting_for_slots.clear()
        finish: dict[int, str] = {}
        candidates: list[tuple[_Run, TIRow]] = []
        active: dict[tuple[int, str], int] = defaultdict(int)
        for run in runs.values():
            dag, _ = self._version(conn, run.dag_version_id)
            rows = tis[run.id]
            plan = plan_run(dag, rows, now, hidden[run.id])
            while plan.expand:
                for placeholder in plan.expand:
                    rows = expand_mapped(
                        conn, run.id, run.dag_id, run.run_id, dag, placeholder, rows, now
                    )
                plan = plan_run(dag, rows, now, hidden[run.id])
            if plan.iterate and self._expand_iterate(conn, run, dag, plan.iterate, now):
                self._dirty.add(run.id)  # new instances (or more items): plan them next
            finish.update(plan.finish)
            for task_id, state in plan.finish_tasks.items():
                transitions.finish_unstarted(conn, run.id, task_id, state, now)
            if plan.run_state is not None:
                self._finish_run(conn, run, plan.run_state, now)
                continue
            for r in rows:
                if r.state in ACTIVE_TI_STATES:
                    active[(run.id, "")] += 1
                    active[(run.id, r.task_id)] += 1
            candidates.extend((run, r) for r in plan.ready)
            if plan.finish_tasks or any(h.more for h in hidden[run.id].values()):
                self._more_unstarted.add(run.id)
        if finish:
            transitions.finish_unrun(conn, finish, now)
            # Finishing without running may complete the run or release downstream tasks.
            self._dirty |= {
                run.id for run in runs.values() if any(r.id in finish for r in tis[run.id])
            }
        return self._queue(conn, candidates, active, now)

    def _expand_iterate(
        self,
        conn: Connection,
        run: _Run,
        dag: SerializedDag,
        placeholders: list[TIRow],
        now: datetime,
    ) -> bool:
        """Create the instances of iterate tasks whose items arrived; True if any changed."""
        from tailrace.scheduler._iterate import Sources, expand_iterate

        sources = Sources(conn, run.id, dag.task)
        changed = False
        for placeholder in placeholders:
            task = dag.task(placeholder.task_id)
            done = expand_iterate(
                conn,
                run.id,
                run.run_id,
                dag,
                placeholder.id,
                task,
                now,
                self.expansion_batch,
                sources,
            )
            self.expanded += done.created
            changed |= done.created > 0 or done.more or done.closed
        self._refresh_planner_statistics(conn)
        return changed

    def _refresh_planner_statistics(self, conn: Connection) -> None:
        """PostgreSQL plans from statistics autovacuum refreshes about once a minute; a
        table that grew from thousands to a million instances meanwhile gets scans where
        index lookups belong. Analyze it each time expansion has doubled it (a sample: tens
        of milliseconds, a handful of times per million instances)."""
        if not is_postgres(conn) or self.expanded < ANALYZE_AFTER:
            return
        if self.expanded >= 2 * self._expanded_at_analyze:
            conn.exec_driver_sql("ANALYZE task_instance")
            self._expanded_at_analyze = self.expanded

    def _queue(
        self,
        conn: Connection,
        candidates: list[tuple[_Run, TIRow]],
        active: dict[tuple[int, str], int],
        now: datetime,
    ) -> list[RunTask]:
        """Hand ready instances to the executor as slots allow. ``active`` counts running
        instances per (run, task), and per run under the task id ``""``."""
        more_unstarted, self._more_unstarted = self._more_unstarted, set()
        if not candidates:
            return []
        busy = conn.scalar(_BUSY) or 0
        slots = self.parallelism - busy
        per_task = self._active_per_task(conn, candidates)
        queued: list[tuple[_Run, TIRow]] = []
        waiting: list[int] = []
        for run, row in candidates:
            dag, _ = self._version(conn, run.dag_version_id)
            task = dag.task(row.task_id)
            if task.start_trigger is not None and row.next_method is None:
                # Starts in the triggerer: takes no worker slot.
                start_from_trigger(conn, row.id, task, now)
                self._triggers_changed = True
                continue
            if row.state == TIS.UP_FOR_RETRY and row.next_method is not None:
                # A stream consumer's retry resumes after the last acknowledged event: the
                # new try waits on the same trigger run, deferred, taking no worker slot.
                transitions.resume_stream_retry(conn, row.id, now)
                self._dirty.add(run.id)
                continue
            cap = task.max_active_tis_per_dag
            run_cap = task.max_active_tis_per_dagrun
            key = (run.dag_id, row.task_id)
            if (
                slots <= 0
                or active[(run.id, "")] >= dag.max_active_tasks
                or (cap is not None and per_task.get(key, 0) >= cap)
                or (run_cap is not None and active[(run.id, row.task_id)] >= run_cap)
            ):
                # Mapped instances wait unmarked: they are read a page at a time.
                if row.state != TIS.SCHEDULED and row.map_index < 0:
                    waiting.append(row.id)
                self._waiting_for_slots.add(run.id)
                continue
            slots -= 1
            active[(run.id, "")] += 1
            active[(run.id, row.task_id)] += 1
            per_task[key] = per_task.get(key, 0) + 1
            queued.append((run, row))
        # A run whose next page of unstarted instances was not read: read it now.
        self._dirty |= more_unstarted - self._waiting_for_slots
        transitions.wait_for_slot(conn, waiting, now)
        transitions.queue(conn, [row.id for _, row in queued], self.job_id, now)
        return [self._workload(conn, run, row) for run, row in queued]

    def _active_per_task(
        self, conn: Connection, candidates: list[tuple[_Run, TIRow]]
    ) -> dict[tuple[str, str], int]:
        capped = set()
        for run, row in candidates:
            dag, _ = self._version(conn, run.dag_version_id)
            if dag.task(row.task_id).max_active_tis_per_dag is not None:
                capped.add((run.dag_id, row.task_id))
        if not capped:
            return {}
        counts: dict[tuple[str, str], int] = {}
        for dag_id, task_id in capped:
            counts[(dag_id, task_id)] = (
                conn.scalar(
                    select(func.count())
                    .select_from(TaskInstance)
                    .where(
                        TaskInstance.dag_id == dag_id,
                        TaskInstance.task_id == task_id,
                        TaskInstance.state.in_([TIS.QUEUED, TIS.RUNNING]),
                    )
                )
                or 0
            )
        return counts

    def _workload(self, conn: Connection, run: _Run, row: TIRow) -> RunTask:
        dag, fileloc = self._version(conn, run.dag_version_id)
        task = dag.task(row.task_id)
        resuming = row.next_method is not None
        try_number = row.try_number if resuming else row.try_number + 1
        next_kwargs, events = None, []
        if resuming:
            resume = conn.execute(
                select(
                    TaskInstance.next_kwargs,
                    Trigger.id,
                    Trigger.consumer,
                    Trigger.acked_sequence,
                )
                .outerjoin(Trigger, Trigger.id == TaskInstance.trigger_id)
                .where(TaskInstance.id == row.id)
            ).one()
            next_kwargs = resume.next_kwargs
            if resume.id is not None:
                limit = task.max_batch_size if resume.consumer == "batch" else 1
                events = pending_events(conn, resume.id, resume.acked_sequence, limit)
        return RunTask(
            ti_id=row.id,
            dag_run_id=run.id,
            dag_id=run.dag_id,
            task_id=row.task_id,
            queue=task.queue,
            map_index=row.map_index,
            try_number=try_number,
            max_tries=row.max_tries,
            fileloc=fileloc,
            dag_run=DagRunPayload(
                dag_id=run.dag_id,
                run_id=run.run_id,
                run_type=run.run_type,
                logical_date=run.logical_date,
                data_interval_start=run.data_interval_start,
                data_interval_end=run.data_interval_end,
                start_date=run.start_date,
                conf=run.conf or {},
            ),
            log_path=str(
                log_path_for(
                    self.log_folder, run.dag_id, run.run_id, row.task_id, row.map_index, try_number
                )
            ),
            execution_timeout=task.execution_timeout,
            mapped_task_ids=[t.task_id for t in dag.tasks if t.is_mapped],
            mapped_lengths=self._mapped_lengths(conn, run.id, dag, task),
            next_method=row.next_method,
            next_kwargs=next_kwargs,
            events=events,
        )

    @staticmethod
    def _mapped_lengths(
        conn: Connection, run_id: int, dag: SerializedDag, task: SerializedTask
    ) -> dict[str, int]:
        """Instance counts of an iterate task's mapped sources, for ``concat`` (the one
        combinator that must know where a mapped input ends)."""
        if task.iterate is None or not task.iterate.uses("concat"):
            return {}
        return {
            t: instance_count(conn, run_id, t)
            for t in task.iterate_sources
            if dag.task(t).is_mapped
        }

    def _finish_run(self, conn: Connection, run: _Run, state: DagRunState, now: datetime) -> None:
        conn.execute(update(DagRun).where(DagRun.id == run.id).values(state=state, end_date=now))
        self._runs_finished = True
        log.info("run %s of %s finished: %s", run.run_id, run.dag_id, state.value)

    # -- served to workers, from the executor's thread -----------------------------------

    def _read_xcoms(self, req: WorkerRequest) -> WorkerReply:
        with self._reader.connect() as conn:
            return answer_worker_request(conn, req)
