"""The scheduler loop: event-driven, one writer, batched transactions.

Each step collects the inbox (executor events, wake-ups), applies every report in one
transaction, creates due runs, has the pass (`_pass`) plan only the runs something
happened in, and has dispatch (`_dispatch`) turn ready instances into workloads for the
executor. It sleeps only until the next timer (a retry, a scheduled run, a batch of
trigger events falling due) or the safety-net poll, and wakes at once when something
arrives. User code never runs here: everything comes from serialized DAGs and the
database.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path

from sqlalchemy import Connection, Engine, func, select

from tailrace import jobs, metrics, transitions
from tailrace.clock import Clock, utcnow
from tailrace.db import is_postgres, log_failure, read_only_engine
from tailrace.db.models import Dag, DagRun, TaskInstance
from tailrace.execution import DagCallbackFinished, TaskFinished, Workload
from tailrace.execution.protocol import VariableWrite, WorkerReply, WorkerRequest
from tailrace.executors.base import BaseExecutor, ExecutorEvent
from tailrace.scheduler._assets import create_asset_triggered_runs
from tailrace.scheduler._deadlines import hand_on_missed
from tailrace.scheduler._dispatch import Dispatched, Dispatcher
from tailrace.scheduler._inbox import (
    BACKLOG_COALESCE_SECONDS,
    SATURATED_COALESCE_SECONDS,
    Collected,
    Inbox,
)
from tailrace.scheduler._orphans import (
    fail_silent_remote_tries,
    lose_tries_of_lost_workers,
    reset_orphans,
)
from tailrace.scheduler._pass import RunPass, timeout_deadline
from tailrace.scheduler._runs import create_scheduled_runs, start_queued_runs
from tailrace.scheduler._triggers import (
    EARLIEST_DEFERRAL_DEADLINE,
    consume_trigger_events,
    expire_deferrals,
)
from tailrace.scheduler.reports import Applied, apply_executor_events
from tailrace.scheduler.versions import DagVersions
from tailrace.scheduler.worker_requests import answer_worker_request
from tailrace.serialization import SerializedDag, SerializedTask
from tailrace.state import DagRunState
from tailrace.state import TaskInstanceState as TIS
from tailrace.store import dag_callbacks, deadlines, pools
from tailrace.store.triggers import expire_dedup_records, prunable_triggers, prune_events
from tailrace.streams import expire_streams
from tailrace.tracing.timeline import install_timeline, trim_timelines

log = logging.getLogger(__name__)

STEP_RETRY_SECONDS = 1.0
# A remote executor is asked this often which of its workers were lost.
WORKER_CHECK_SECONDS = 1.0
# Acknowledged trigger events are deleted at most this often, many acks in one go.
PRUNE_INTERVAL_SECONDS = 0.5
TRIM_INTERVAL_SECONDS = 10.0
# At most this long between looks for queue messages' dedup records to forget.
DEDUP_EXPIRY_SECONDS = 10.0
_RUNNING_RUNS = select(DagRun.id, DagRun.dag_version_id, DagRun.start_date).where(
    DagRun.state == DagRunState.RUNNING
)
_EARLIEST_RETRY = (
    select(func.min(TaskInstance.next_retry_at))
    .where(TaskInstance.state == TIS.UP_FOR_RETRY)
    .scalar_subquery()
)
# What makes runs, each remembering the DAGs it left waiting for a slot (ADR 0045).
_RUN_MAKERS = ("scheduled", "asset", "queued")
# A run another scheduler was planning is looked at again this soon.
CONTENDED_RETRY_SECONDS = 0.02


@dataclass
class _Step:
    """What one step has learned so far: made fresh for each step, never reset by hand."""

    now: datetime
    full_scan: bool
    look_around: bool
    timer_fired: bool
    # DAGs with a run that ended this step (one may free a max_active_runs slot).
    finished_dags: set[str] = field(default_factory=set)
    # Runs were made or started, or a next scheduled moment moved: the timers may move.
    runs_made: bool = False
    triggers_changed: bool = False
    # Asset events were written: an asset-scheduled DAG may be due.
    assets_changed: bool = False
    # Task callbacks were recorded (tries that ended without a worker): hand them over.
    callbacks_recorded: bool = False
    acked_triggers: set[int] = field(default_factory=set)
    # Of those, the ones with nothing left to prune (their events went as acknowledged),
    # and how many events went so.
    pruned_triggers: set[int] = field(default_factory=set)
    pruned_events: int = 0
    workloads: list[Workload] = field(default_factory=list)
    # A remote executor's broker holds a backlog: the workloads may travel together.
    backlog: bool = False
    # Lost workers whose tries this step handles: told to the executor once committed.
    lost_workers: list[str] = field(default_factory=list)
    # Tries to stop: their instances were skipped by a run's timeout.
    terminate: list[int] = field(default_factory=list)


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
        stream_retention: float = 7 * 24 * 3600.0,
        redelivery_window: float = 3600.0,
        default_pool_slots: int = 128,
    ) -> None:
        self.engine = engine
        self.default_pool_slots = default_pool_slots
        # The run timeline records this scheduler's state changes (the run page's Gantt).
        install_timeline()
        # Workers' XCom reads must not take SQLite's write lock (ADR 0002).
        self._reader = read_only_engine(engine)
        self._row_locks = is_postgres(engine)
        self.executor = executor
        self.poll_interval = poll_interval
        self.clock = clock
        # `dags test`: look after these runs only, and create no scheduled runs.
        self.only_runs = set(only_runs) if only_runs is not None else None
        self.inbox = Inbox()
        versions = DagVersions()
        self._versions = versions
        self._pass = RunPass(
            versions, page=max(64, 2 * parallelism), expansion_batch=expansion_batch
        )
        self._dispatch = Dispatcher(versions, parallelism=parallelism, log_folder=str(log_folder))
        # Runs to plan at the next step.
        self._dirty: set[int] = set()
        # Runs held back by depends_on_past, by DAG: planned again when another run of
        # their DAG changes.
        self._past_waiters: dict[str, set[int]] = {}
        # Runs with ready instances that found no slot: planned again when a try ends.
        self._waiting_for_slots: frozenset[int] = frozenset()
        # How long a collect gathers reports: the last dispatch found every executor slot
        # taken (ADR 0047), and a remote executor's broker holds a backlog (ADR 0048).
        self._gather_seconds = 0.0
        self._contended: frozenset[int] = frozenset()
        # Reports whose transaction failed (the database went away): applied next step.
        self._unapplied: list[ExecutorEvent] = []
        # Held by iterate consumers downstream: looked at again when instances finish.
        self._held_triggers: set[int] = set()
        # Triggers whose stored events an instance waits on again (a consumer's retry): no
        # new event need wake us for them, so the next step looks at them anyway.
        self._known_news: set[int] = set()
        # DAGs whose next run waits for a max_active_runs slot, by what makes runs
        # (_RUN_MAKERS), as each last found; a run of theirs ending
        # calls for another look. Asset ids by name, as found (assets are never deleted).
        self._held_back: dict[str, set[str]] = {}
        self._asset_ids: dict[str, int] = {}
        # Triggers with acknowledged events to delete, and when pruning is next due.
        self._to_prune: set[int] = set()
        self._next_prune = 0.0
        self._to_trim: set[int] = set()
        self._next_trim = 0.0
        self.pruned_events = 0  # deleted so far, for benchmarks and the curious
        # Finished runs' streams are kept this long (seconds) unless their DAG says.
        self.stream_retention = stream_retention
        # Queue messages' dedup records outlive their events this long (ADR 0032).
        self.redelivery_window = redelivery_window
        self._next_dedup_expiry = 0.0
        self.expired_dedup_records = 0
        self._retention_due = False
        self._next_full_scan = 0.0
        self._next_heartbeat = 0.0
        self._next_worker_check = 0.0
        self._next_timer: datetime | None = None
        # A partial batch of trigger events falls due (max_batch_latency): look then.
        self._batch_deadline: datetime | None = None
        self._started = False
        self.job_id = 0
        self.steps = 0  # scheduler passes, for benchmarks and the curious
        # How long recent passes took (waiting excluded), for benchmarks and the curious.
        self.pass_seconds: deque[float] = deque(maxlen=100_000)
        # Called with triggers whose events were acknowledged (unpauses backpressure).
        self.on_acks: Callable[[set[int]], None] = lambda trigger_ids: None
        # Called after a step that created or cancelled triggers (wakes the triggerer).
        self.on_triggers_changed: Callable[[], None] = lambda: None

    @property
    def expanded(self) -> int:
        """Iterate instances created so far."""
        return self._pass.expanded

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        if not self._started:
            with self.engine.begin() as conn:
                self.job_id = jobs.register(conn, "scheduler", self.clock())
                pools.ensure_default_pool(conn, self.default_pool_slots)
            self._dispatch.job_id = self.job_id
            self._next_heartbeat = time.monotonic() + self.poll_interval
            self.executor.on_workers_lost = self._workers_lost
            self.executor.start(self.inbox.put, self._read_xcoms)
            self._started = True

    def stop(self) -> None:
        if self._started:
            self.executor.stop()
            with self.engine.begin() as conn:
                jobs.finish(conn, self.job_id)
            self._started = False

    def wake(self) -> None:
        self.inbox.wake()

    def _workers_lost(self) -> None:
        """Thread-safe: the executor found workers lost; handle them at once."""
        self._next_worker_check = 0.0
        self.inbox.wake()

    def runs_changed(self, run_ids: Collection[int]) -> None:
        """Thread-safe: instances of these runs changed elsewhere (a remote worker's report
        applied by the api-server): plan them."""
        self.inbox.runs_changed(run_ids)

    def events_arrived(self, trigger_ids: Collection[int]) -> None:
        """Thread-safe: these triggers have new durable events (from an in-process triggerer)."""
        self.inbox.events_arrived(trigger_ids)

    def asset_events_arrived(self) -> None:
        """Thread-safe: an in-process triggerer's asset watchers wrote asset events."""
        self.inbox.asset_events_arrived()

    def run(self, stop: threading.Event) -> None:
        self.start()
        try:
            while not stop.is_set():
                try:
                    self.step(self._sleep_budget())
                except Exception as exc:
                    # The step's transaction rolled back: nothing half-applied. A database
                    # that went away comes back; a bug must not stop every other DAG.
                    log_failure(
                        log, exc, "scheduler step", f"retrying in {STEP_RETRY_SECONDS:.0f}s"
                    )
                    stop.wait(STEP_RETRY_SECONDS)
                    self._dirty.clear()
                    self._next_full_scan = 0.0  # look at everything again
        finally:
            self.stop()

    def run_until(self, done: Callable[[], bool], timeout: float = 600.0) -> bool:
        """Step until ``done()`` holds; the test/CLI seam (`tailrace dags test`).

        ``done()`` is asked before each step, so a condition that already holds costs no
        step (a step with nothing to do waits up to ``poll_interval`` for a wake-up). The
        first step looks at everything at once: whoever made the run may not have woken
        this scheduler."""
        self.start()
        deadline = time.monotonic() + timeout
        wait = 0.0
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.step(min(wait, left))
            wait = self._sleep_budget()
        return True

    @property
    def next_timer(self) -> datetime | None:
        """The next moment a timer wants a step (a retry, a scheduled run, a deferral's
        timeout, a deadline alert, a batch of trigger events falling due); None when none
        is set."""
        timers = [t for t in (self._next_timer, self._batch_deadline) if t is not None]
        return min(timers) if timers else None

    @property
    def has_work(self) -> bool:
        """Whether a step now would find something to do without a timer or a wake-up:
        runs to plan, reports not yet applied, or an inbox that is not empty."""
        return bool(self._dirty or self._contended or self._unapplied) or not self.inbox.empty()

    def _sleep_budget(self) -> float:
        budget = self.poll_interval
        for timer in (self._next_timer, self._batch_deadline):
            if timer is not None:
                budget = min(budget, (timer - self.clock()).total_seconds())
        return max(0.0, budget)

    # -- one step ----------------------------------------------------------------------

    def _collect(self, timeout: float) -> Collected:
        if self._contended:
            timeout = min(timeout, CONTENDED_RETRY_SECONDS)
        collected = self.inbox.collect(timeout, wait=not self._dirty, gather=self._gather_seconds)
        self._dirty |= collected.changed_runs
        return collected

    def _begin(self, collected: Collected) -> _Step:
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
        look_around = full_scan or collected.woken or timer_fired
        # An asset watcher's events are asset events already: consumers may be due.
        return _Step(
            now, full_scan, look_around, timer_fired, assets_changed=collected.asset_events
        )

    def step(self, timeout: float = 0.0) -> None:
        collected = self._collect(timeout)
        events, self._unapplied = [*self._unapplied, *collected.events], []
        self._dirty, self._contended = self._dirty | self._contended, frozenset()
        began = time.perf_counter()
        self.steps += 1
        step = self._begin(collected)
        retries = any(isinstance(e, TaskFinished) and e.outcome == "failed" for e in events)
        tasks_finished = bool(collected.changed_runs) or any(
            isinstance(e, TaskFinished) for e in events
        )
        try:
            with self.engine.begin() as conn, transitions.batched(conn):
                self._apply(conn, step, events, collected.triggers_with_events, tasks_finished)
                # Acknowledging events locked trigger rows the triggerer writes to: release
                # them before planning (an expansion can take a while) rather than after.
                # SQLite has no row locks to release, only its one write lock: a second
                # transaction would wait for it again behind the triggerer's next batch.
                split = bool(step.acked_triggers) and self._row_locks
                if not split:
                    self._plan(conn, step, retries)
        except Exception:
            # Nothing of it was committed: workers' reports must not be lost with it, nor
            # an asset the step created be remembered by an id the database forgot.
            self._unapplied = events
            self._asset_ids.clear()
            self._pass.forget()
            raise
        if split:
            try:
                with self.engine.begin() as conn, transitions.batched(conn):
                    self._plan(conn, step, retries)
            except Exception:
                self._pass.forget()
                raise
        if step.terminate:
            self.executor.terminate(step.terminate)
        if step.workloads:
            self.executor.queue_workloads(step.workloads, backlog=step.backlog)
        if step.lost_workers:
            self.executor.workers_handled(step.lost_workers)
        if step.triggers_changed:
            self.on_triggers_changed()
        if step.acked_triggers:
            self.on_acks(step.acked_triggers)
        self._housekeeping(step)
        seconds = time.perf_counter() - began
        self.pass_seconds.append(seconds)
        metrics.get().scheduler_loop_duration.observe(seconds)

    def _housekeeping(self, step: _Step) -> None:
        """The log's upkeep (ADR 0023, 0032), each in its own short transaction after the
        step's and after its workloads went out (a hop waits on them, not on this):
        consumed events, forgotten queue messages, streams past retention."""
        self.pruned_events += step.pruned_events  # committed with the step
        self._to_prune |= step.acked_triggers - step.pruned_triggers
        self._to_trim |= step.acked_triggers
        if step.full_scan and self.only_runs is None:
            with self._reader.connect() as conn:
                found = prunable_triggers(conn)
            self._to_prune.update(found)
            self._to_trim.update(found)
        if self._to_prune and time.monotonic() >= self._next_prune:
            self._prune()
        if self._to_trim and time.monotonic() >= self._next_trim:
            self._trim()
        if self.only_runs is not None:
            return
        if time.monotonic() >= self._next_dedup_expiry:
            self._expire_dedup_records(step.now)
        if step.full_scan or self._retention_due:
            with self.engine.begin() as conn:
                _, self._retention_due = expire_streams(conn, step.now, self.stream_retention)

    def _prune(self) -> None:
        """Delete acknowledged events (ADR 0023): an endless stream's table stays bounded.
        Its own short transaction, after the step's: a failure here loses nothing. (A
        direct stream's events mostly go as the step acknowledges them.)"""
        with self.engine.begin() as conn:
            deleted, more = prune_events(conn, self._to_prune)
        self.pruned_events += deleted
        self._to_prune = more
        # Behind (a budget's worth left): again at the next pass, or a stream producing
        # more than a budget per interval (10,000 events/s) would outgrow pruning.
        self._next_prune = time.monotonic() + (0.0 if more else PRUNE_INTERVAL_SECONDS)

    def _trim(self) -> None:
        """The streaming instances' timelines (five rows a batch handed): less often than
        events are pruned, each instance's newest rows counted off an index."""
        with self.engine.begin() as conn:
            trim_timelines(conn, self._to_trim)
        self._to_trim = set()
        self._next_trim = time.monotonic() + TRIM_INTERVAL_SECONDS

    def _expire_dedup_records(self, now: datetime) -> None:
        """Forget queue messages acknowledged a redelivery window ago: the records stay
        bounded by the messages of (at most) two windows."""
        with self.engine.begin() as conn:
            deleted, more = expire_dedup_records(conn, now, self.redelivery_window)
        self.expired_dedup_records += deleted
        # No precision needed: a record lives one to two windows after its ack anyway.
        pause = min(DEDUP_EXPIRY_SECONDS, self.redelivery_window / 4)
        self._next_dedup_expiry = time.monotonic() + (PRUNE_INTERVAL_SECONDS if more else pause)

    def _apply(
        self,
        conn: Connection,
        step: _Step,
        events: list[ExecutorEvent],
        triggers_with_events: frozenset[int],
        tasks_finished: bool,
    ) -> None:
        """Reports from workers, orphans, the heartbeat, and trigger events."""
        if events:
            self._follow(step, apply_executor_events(conn, events, self._task_for, step.now))
            self._dirty |= self._waiting_for_slots
            for e in events:
                if isinstance(e, DagCallbackFinished):
                    dag_callbacks.finish(conn, e.callback_id, e.ok, e.error, step.now)
        if step.full_scan and self.executor.remote:
            self._dirty |= fail_silent_remote_tries(
                conn,
                step.now,
                self.only_runs,
                self._task_for,
                heartbeat_timeout=self.executor.heartbeat_timeout,
                queued_timeout=self.executor.queued_timeout,
                requeues=self.executor.lost_try_requeues,
            )
        if self.executor.remote and time.monotonic() >= self._next_worker_check:
            self._next_worker_check = time.monotonic() + WORKER_CHECK_SECONDS
            self._check_workers(conn, step)
        elif step.full_scan and not self.executor.remote:
            self._dirty |= reset_orphans(
                conn, self.job_id, step.now, self.only_runs, self._task_for, self.poll_interval
            )
        if time.monotonic() >= self._next_heartbeat:
            self._next_heartbeat = time.monotonic() + self.poll_interval
            jobs.heartbeat(conn, self.job_id, step.now)
            metrics.get().scheduler_heartbeat.inc()
        self._consume_trigger_events(conn, step, set(triggers_with_events), tasks_finished)
        if step.look_around:
            self._hand_on_missed_deadlines(conn, step)

    def _hand_on_missed_deadlines(self, conn: Connection, step: _Step) -> None:
        """Deadlines passed: their callbacks go to a worker or the triggerer (ADR 0037)."""
        handed = hand_on_missed(
            conn, step.now, lambda v: self._versions.get(conn, v)[0], self.only_runs
        )
        step.callbacks_recorded |= handed.callbacks > 0
        step.triggers_changed |= handed.triggers > 0

    def _check_workers(self, conn: Connection, step: _Step) -> None:
        """Tries of lost remote workers run again at once; what they had taken goes back."""
        verdict = self.executor.worker_verdict()
        if verdict is None:
            return
        losses = lose_tries_of_lost_workers(
            conn,
            verdict,
            step.now,
            self.only_runs,
            self._task_for,
            own_job_id=self.job_id,
            job_heartbeat_seconds=self.poll_interval,
            requeues=self.executor.lost_try_requeues,
        )
        self._dirty |= losses.runs
        if verdict.lost:
            log.warning(
                "Celery worker(s) %s lost: %d running tries lost, %d queued tries sent again",
                ", ".join(sorted(verdict.lost)),
                losses.lost,
                len(losses.resend),
            )
        step.workloads.extend(self._dispatch.queued_workloads(conn, losses.resend))
        step.lost_workers.extend(verdict.lost)

    def _consume_trigger_events(
        self, conn: Connection, step: _Step, with_events: set[int], tasks_finished: bool
    ) -> None:
        if tasks_finished or step.look_around:
            # Finished instances may make room for a stream their task iterates over.
            with_events |= self._held_triggers
            self._held_triggers = set()
        with_events |= self._known_news
        self._known_news = set()
        if step.look_around or with_events:
            # After a wake-up anything may have happened: look at every deferred instance.
            applied, deadline = consume_trigger_events(
                conn, self._task_for, step.now, None if step.look_around else with_events
            )
            self._follow(step, applied)
            if deadline is not None:
                self._batch_deadline = min(deadline, self._batch_deadline or deadline)
        if step.full_scan or step.timer_fired:
            self._follow(step, expire_deferrals(conn, self._task_for, step.now))

    def _follow(self, step: _Step, applied: Applied) -> None:
        self._held_triggers |= applied.held_triggers
        self._dirty |= applied.runs
        step.triggers_changed |= applied.triggers_changed
        step.acked_triggers |= applied.acked_triggers
        step.pruned_triggers |= applied.pruned_triggers
        step.pruned_events += applied.pruned_events
        step.assets_changed |= applied.asset_events > 0
        step.callbacks_recorded |= applied.callbacks > 0

    def _plan(self, conn: Connection, step: _Step, retries: bool) -> None:
        """New runs, then the instances of changed runs: finished, expanded or dispatched."""
        if step.look_around:
            self._dirty |= self._due_runs(conn, step.now, all_running=step.full_scan)
            self._make_runs(conn, step, scheduled=True)
        elif step.assets_changed:
            self._make_runs(conn, step, scheduled=False)
        if self._dirty:
            self._schedule(conn, step)
        if self._frees_a_slot(step.finished_dags):
            self._make_runs(conn, step, scheduled=True)
        if step.full_scan or step.callbacks_recorded:
            step.workloads.extend(
                self._dispatch.dag_callbacks(conn, step.now, self.job_id, self.only_runs)
            )
        if step.look_around or retries or step.runs_made or step.triggers_changed:
            self._next_timer = self._earliest_timer(conn)

    def _make_runs(self, conn: Connection, step: _Step, *, scheduled: bool) -> None:
        """Due scheduled runs (with ``scheduled``) and runs for queued asset events made;
        queued runs started, each as ``max_active_runs`` allows. What each left waiting
        for a slot is kept: only a run of those DAGs ending calls for another look."""
        if self.only_runs is None:
            dag_for_version = partial(self._dag_for_version, conn)
            if scheduled:
                self._held_back["scheduled"] = create_scheduled_runs(
                    conn, step.now, dag_for_version
                )
            made = create_asset_triggered_runs(conn, step.now, dag_for_version, self._asset_ids)
            self._held_back["asset"] = made.held_back
            step.runs_made |= scheduled or made.created > 0
        started = start_queued_runs(conn, step.now, self.only_runs)
        self._held_back["queued"] = started.held_back
        self._dirty |= started.started
        step.runs_made |= bool(started.started)

    def _frees_a_slot(self, finished_dags: set[str]) -> bool:
        """Whether a run of ``finished_dags`` ending may let a waiting run be made or
        start: one of them was held back by ``max_active_runs`` (or not looked at yet)."""
        if not finished_dags:
            return False
        if self.only_runs is None and self._held_back.keys() < set(_RUN_MAKERS):
            return True
        return any(finished_dags & held for held in self._held_back.values())

    def _dag_for_version(self, conn: Connection, version_id: int) -> SerializedDag:
        return self._versions.get(conn, version_id)[0]

    def _schedule(self, conn: Connection, step: _Step) -> None:
        planned_ids, room = set(self._dirty), self._dispatch.room(conn)
        planned = self._pass(conn, sorted(planned_ids), step.now, lambda: room.slots)
        self._dirty = set(planned.replan)
        self._follow_past(planned_ids, planned.waiting_on_past, planned.touched_dags)
        self._contended = planned.contended
        step.finished_dags |= planned.finished_dags
        step.callbacks_recorded |= planned.callbacks_recorded
        step.terminate.extend(planned.terminate)
        step.triggers_changed |= planned.triggers_changed
        dispatched = self._dispatch(conn, planned.candidates, planned.active, step.now, room)
        self._waiting_for_slots = dispatched.waiting_runs
        backlog = self._backlog(dispatched)
        self._gather_seconds = self._gather_for(dispatched, backlog)
        self._dirty |= dispatched.replan
        self._known_news |= dispatched.resumed_triggers
        if planned.candidates:
            # A run whose next page of unstarted instances was not read: read it now.
            self._dirty |= planned.more_unstarted - dispatched.waiting_runs
        step.triggers_changed |= dispatched.triggers_changed
        step.workloads.extend(dispatched.workloads)
        step.backlog |= backlog

    def _gather_for(self, dispatched: Dispatched, backlog: bool) -> float:
        if not dispatched.executor_full:
            return 0.0
        if backlog:
            return BACKLOG_COALESCE_SECONDS
        return SATURATED_COALESCE_SECONDS

    def _backlog(self, dispatched: Dispatched) -> bool:
        """Each try a remote worker runs has another waiting in the broker to take next."""
        return (
            self.executor.remote
            and dispatched.executor_full
            and dispatched.unstarted >= max(1, dispatched.running)
        )

    def _follow_past(
        self,
        planned: set[int],
        waiting: Mapping[str, frozenset[int]],
        touched: frozenset[str],
    ) -> None:
        """A run of a DAG changed: its runs waiting on the past are planned again."""
        for dag_id in list(self._past_waiters):
            self._past_waiters[dag_id] -= planned
            if not self._past_waiters[dag_id]:
                del self._past_waiters[dag_id]
        for dag_id, runs in waiting.items():
            self._past_waiters.setdefault(dag_id, set()).update(runs)
        for dag_id in touched:
            self._dirty |= self._past_waiters.get(dag_id, set())

    # -- runs --------------------------------------------------------------------------

    def _task_for(self, conn: Connection, version_id: int, task_id: str) -> SerializedTask:
        return self._versions.task(conn, version_id, task_id)

    def _due_runs(self, conn: Connection, now: datetime, *, all_running: bool) -> set[int]:
        """Runs a timer fired for: retries due, run timeouts; or every running run."""
        # Woken: a clear or mark elsewhere may have reopened a complete mapped task.
        self._pass.forget_counts()
        if all_running:
            q = select(DagRun.id).where(DagRun.state == DagRunState.RUNNING)
        else:
            q = (
                select(TaskInstance.dag_run_id)
                .where(TaskInstance.state == TIS.UP_FOR_RETRY, TaskInstance.next_retry_at <= now)
                .distinct()
            )
        found = set(conn.scalars(q))
        found |= {run_id for run_id, deadline in self._run_deadlines(conn) if deadline <= now}
        return found if self.only_runs is None else found & self.only_runs

    def _run_deadlines(self, conn: Connection) -> list[tuple[int, datetime]]:
        """Running runs whose DAG has a dagrun_timeout, with the moment each times out."""
        found = []
        for run_id, version_id, start_date in conn.execute(_RUNNING_RUNS):
            dag = self._versions.get(conn, version_id)[0]
            deadline = timeout_deadline(dag, start_date)
            if deadline is not None:
                found.append((run_id, deadline))
        return found

    def _earliest_timer(self, conn: Connection) -> datetime | None:
        """The next moment a timer wants a step: the moments kept in columns, in one
        statement, and the running runs' dagrun_timeouts (kept in their DAG versions)."""
        moments = conn.execute(
            select(
                _EARLIEST_RETRY,
                # A DAG whose next run is overdue is held back by max_active_runs: a
                # finishing run, not a timer, releases it, so only future moments count.
                select(func.min(Dag.next_dagrun))
                .where(
                    Dag.is_paused.is_(False),
                    Dag.is_active.is_(True),
                    Dag.next_dagrun > self.clock(),
                )
                .scalar_subquery(),
                EARLIEST_DEFERRAL_DEADLINE,
                deadlines.earliest(self.only_runs),
            )
        ).one()
        timeouts = (deadline for _, deadline in self._run_deadlines(conn))
        timers = [t for t in (*moments, *timeouts) if t is not None]
        return min(timers) if timers else None

    # -- served to workers, from the executor's thread -----------------------------------

    def _read_xcoms(self, req: WorkerRequest) -> WorkerReply:
        if isinstance(req, VariableWrite):
            with self.engine.begin() as conn:
                return answer_worker_request(conn, req)
        with self._reader.connect() as conn:
            return answer_worker_request(conn, req)
