"""Dispatch: the ready instances a pass found, within the slots and concurrency limits,
become queued tries and their workloads (or deferred tries, for tasks that start in the
triggerer)."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, func, select

from tailrace import tracing, transitions
from tailrace.clock import utcnow
from tailrace.db.models import DagRun, TaskInstance, Trigger
from tailrace.execution import (
    CallbackTry,
    DagRunPayload,
    DeadlineCall,
    RunDagCallback,
    RunTask,
    dag_callback_log_path,
    log_path_for,
)
from tailrace.scheduler._iterate import instance_count
from tailrace.scheduler._pass import ActiveCounts, Run
from tailrace.scheduler._planner import TIRow
from tailrace.scheduler._triggers import pending_events, start_from_trigger
from tailrace.scheduler.versions import DagVersions
from tailrace.serialization import SerializedDag, SerializedTask
from tailrace.state import TaskInstanceState as TIS
from tailrace.store import dag_callbacks, deadlines, pools
from tailrace.tracing.owner import workload_traceparent
from tailrace.tracing.timeline import events_handed

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Dispatched:
    workloads: list[RunTask]
    # Runs with ready instances that found no slot: planned again when one frees up.
    waiting_runs: frozenset[int]
    # Runs to plan again at once (a stream consumer's retry went back to its trigger).
    replan: frozenset[int]
    # Triggers were created (tasks that start in the triggerer).
    triggers_changed: bool
    # Triggers a consumer's retry waits on again: their stored events are looked at next.
    resumed_triggers: frozenset[int] = frozenset()
    # Ready instances found every executor slot taken: the executor has work queued.
    executor_full: bool = False
    # With the executor full: tries queued that no worker has started yet (those queued
    # here included), and tries workers run.
    unstarted: int = 0
    running: int = 0


class Room:
    """This step's free slots: under the scheduler's parallelism and in each pool. Read
    when first asked (the pass asks to size its pages of mapped instances), once a step."""

    def __init__(self, conn: Connection, parallelism: int) -> None:
        self._conn = conn
        self._parallelism = parallelism
        self._read: pools.Room | None = None

    def _taken(self) -> pools.Room:
        if self._read is None:
            self._read = pools.room(self._conn)
        return self._read

    @property
    def slots(self) -> int:
        return self._parallelism - self._taken().busy

    @property
    def pools(self) -> dict[str, int]:
        """Open slots by pool: dispatch takes from it as it queues."""
        return self._taken().open

    @property
    def unstarted(self) -> int:
        """Tries queued before this step that no worker has started yet."""
        return self._taken().unstarted

    @property
    def running(self) -> int:
        """Tries queued or running before this step that a worker has started."""
        return self._taken().busy - self._taken().unstarted


class Dispatcher:
    def __init__(self, versions: DagVersions, *, parallelism: int, log_folder: str) -> None:
        self.versions = versions
        self.parallelism = parallelism
        self.log_folder = log_folder
        self.job_id = 0
        self._missing_pools_told: set[str] = set()

    def __call__(
        self,
        conn: Connection,
        candidates: Sequence[tuple[Run, TIRow]],
        active: ActiveCounts,
        now: datetime,
        room: Room | None = None,
    ) -> Dispatched:
        """Hand ready instances to the executor as slots allow."""
        if not candidates:
            return Dispatched([], frozenset(), frozenset(), False)
        active = defaultdict(int, active)
        room = room or self.room(conn)
        slots, pool_room = room.slots, room.pools
        # Higher priority weights first, as in Airflow; ties keep each run's order.
        candidates = sorted(
            candidates, key=lambda c: -self._dag(conn, c[0]).task(c[1].task_id).priority_weight
        )
        per_task = self._active_per_task(conn, candidates)
        queued: list[tuple[Run, TIRow]] = []
        waiting: list[int] = []
        waiting_runs: set[int] = set()
        executor_full = False
        replan: set[int] = set()
        resumed_triggers: set[int] = set()
        triggers_changed = False
        for run, row in candidates:
            dag = self._dag(conn, run)
            task = dag.task(row.task_id)
            if task.start_trigger is not None and row.next_method is None:
                # Starts in the triggerer: takes no worker slot.
                start_from_trigger(conn, row.id, task, now, _try_traceparent(run, row))
                triggers_changed = True
                continue
            if row.state == TIS.UP_FOR_RETRY and row.next_method is not None:
                # A stream consumer's retry resumes after the last acknowledged event: the
                # new try waits on the same trigger run, deferred, taking no worker slot.
                resumed = transitions.resume_stream_retry(conn, row.id, now)
                if resumed is not None:
                    resumed_triggers.add(resumed)
                replan.add(run.id)
                continue
            cap = task.max_active_tis_per_dag
            run_cap = task.max_active_tis_per_dagrun
            key = (run.dag_id, row.task_id)
            if (
                slots <= 0
                or active[(run.id, "")] >= dag.max_active_tasks
                or (cap is not None and per_task.get(key, 0) >= cap)
                or (run_cap is not None and active[(run.id, row.task_id)] >= run_cap)
                or not self._pool_has_room(pool_room, run.dag_id, task)
            ):
                executor_full |= slots <= 0
                # Mapped instances wait unmarked: they are read a page at a time.
                if row.state != TIS.SCHEDULED and row.map_index < 0:
                    waiting.append(row.id)
                waiting_runs.add(run.id)
                continue
            slots -= 1
            pool_room[task.pool] -= task.pool_slots
            active[(run.id, "")] += 1
            active[(run.id, row.task_id)] += 1
            per_task[key] = per_task.get(key, 0) + 1
            queued.append((run, row))
        transitions.wait_for_slot(conn, waiting, now)
        transitions.queue(conn, [row.id for _, row in queued], self.job_id, now)
        return Dispatched(
            [self._workload(conn, run, row, now) for run, row in queued],
            frozenset(waiting_runs),
            frozenset(replan),
            triggers_changed,
            frozenset(resumed_triggers),
            executor_full,
            room.unstarted + len(queued) if executor_full else 0,
            room.running if executor_full else 0,
        )

    def room(self, conn: Connection) -> Room:
        return Room(conn, self.parallelism)

    def queued_workloads(self, conn: Connection, ti_ids: Sequence[int]) -> list[RunTask]:
        """The workloads of tries already queued, to send again (their worker was lost
        before starting them): the same try, so the same workload."""
        if not ti_ids:
            return []
        rows = conn.execute(
            select(
                TaskInstance.id,
                TaskInstance.task_id,
                TaskInstance.map_index,
                TaskInstance.state,
                TaskInstance.try_number,
                TaskInstance.max_tries,
                TaskInstance.next_method,
                DagRun.id.label("run_pk"),
                DagRun.dag_id,
                DagRun.run_id,
                DagRun.dag_version_id,
                DagRun.run_type,
                DagRun.logical_date,
                DagRun.data_interval_start,
                DagRun.data_interval_end,
                DagRun.start_date,
                DagRun.conf,
            )
            .join(DagRun, DagRun.id == TaskInstance.dag_run_id)
            .where(TaskInstance.id.in_(ti_ids), TaskInstance.state == TIS.QUEUED)
        ).all()
        workloads = []
        for r in rows:
            run = Run(
                id=r.run_pk,
                dag_id=r.dag_id,
                run_id=r.run_id,
                dag_version_id=r.dag_version_id,
                run_type=r.run_type,
                logical_date=r.logical_date,
                data_interval_start=r.data_interval_start,
                data_interval_end=r.data_interval_end,
                start_date=r.start_date,
                conf=r.conf,
            )
            # _workload numbers a new try from the one before it; a resumption keeps its.
            before = r.try_number if r.next_method is not None else r.try_number - 1
            row = TIRow(
                r.id, r.task_id, r.map_index, r.state, before, r.max_tries, None, r.next_method
            )
            workloads.append(self._workload(conn, run, row, utcnow()))
        return workloads

    def _pool_has_room(self, room: dict[str, int], dag_id: str, task: SerializedTask) -> bool:
        if task.pool not in room:
            # As in Airflow, a task of a pool that does not exist waits (scheduled) until
            # someone creates it; said once per pool, not once per pass.
            if task.pool not in self._missing_pools_told:
                self._missing_pools_told.add(task.pool)
                log.warning(
                    "task %r of DAG %r uses pool %r, which does not exist: it waits until "
                    "the pool is created (tailrace pools set %s SLOTS)",
                    task.task_id,
                    dag_id,
                    task.pool,
                    task.pool,
                )
            return False
        return room[task.pool] >= task.pool_slots

    def dag_callbacks(
        self, conn: Connection, now: datetime, job_id: int, only_runs: Collection[int] | None
    ) -> list[RunDagCallback]:
        """Finished runs' DAG callbacks, and task callbacks of tries that ended without a
        worker, as workloads: a worker runs them."""
        workloads = []
        rows = dag_callbacks.take_pending(conn, now, job_id, only_runs)
        missed = deadlines.of_callbacks(
            conn, [r.id for r in rows if r.kind == dag_callbacks.DEADLINE_KIND]
        )
        for row in rows:
            dag, fileloc = self.versions.get(conn, row.dag_version_id)
            tried = None
            log_path = dag_callback_log_path(self.log_folder, row.dag_id, row.run_id, row.kind)
            if row.task_instance_id is not None:
                tried = CallbackTry(
                    ti_id=row.task_instance_id,
                    dag_run_id=row.dag_run_id,
                    task_id=row.task_id,
                    map_index=row.map_index,
                    try_number=row.try_number,
                    max_tries=row.max_tries,
                    error=row.task_error,
                )
                # In the try's own log, after what its end said there.
                log_path = log_path_for(
                    self.log_folder,
                    row.dag_id,
                    row.run_id,
                    row.task_id,
                    row.map_index,
                    row.try_number,
                )
            workloads.append(
                RunDagCallback(
                    callback_id=row.id,
                    dag_id=row.dag_id,
                    fileloc=fileloc,
                    kind=row.kind,
                    reason=row.reason,
                    dag_run=DagRunPayload(
                        dag_id=row.dag_id,
                        run_id=row.run_id,
                        run_type=row.run_type,
                        logical_date=row.logical_date,
                        data_interval_start=row.data_interval_start,
                        data_interval_end=row.data_interval_end,
                        start_date=row.start_date,
                        conf=row.conf or {},
                    ),
                    log_path=str(log_path),
                    queue=dag.task(row.task_id).queue if tried is not None else "default",
                    task=tried,
                    deadline=_deadline_call(dag, missed.get(row.id)),
                )
            )
        return workloads

    def _dag(self, conn: Connection, run: Run) -> SerializedDag:
        return self.versions.get(conn, run.dag_version_id)[0]

    def _active_per_task(
        self, conn: Connection, candidates: Sequence[tuple[Run, TIRow]]
    ) -> dict[tuple[str, str], int]:
        capped = set()
        for run, row in candidates:
            if self._dag(conn, run).task(row.task_id).max_active_tis_per_dag is not None:
                capped.add((run.dag_id, row.task_id))
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

    def _workload(self, conn: Connection, run: Run, row: TIRow, now: datetime) -> RunTask:
        dag, fileloc = self.versions.get(conn, run.dag_version_id)
        task = dag.task(row.task_id)
        resuming = row.next_method is not None
        try_number = row.try_number if resuming else row.try_number + 1
        next_kwargs, events = None, []
        trigger_id, consumer = None, ""
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
            trigger_id, consumer = resume.id, resume.consumer
            if resume.id is not None:
                limit = task.max_batch_size if resume.consumer == "batch" else 1
                events = pending_events(conn, resume.id, resume.acked_sequence, limit)
        handed = None
        if events and trigger_id is not None:
            handed = events_handed(
                conn,
                ti_id=row.id,
                trigger_id=trigger_id,
                first=events[0].sequence_index,
                last=events[-1].sequence_index,
                consumer=consumer,
                now=now,
            )
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
            mapped_lengths=_mapped_lengths(conn, run.id, dag, task),
            next_method=row.next_method,
            next_kwargs=next_kwargs,
            events=events,
            traceparent=workload_traceparent(
                trace_id=tracing.run_trace_id(run.dag_id, run.run_id, run.id),
                ti_id=row.id,
                try_number=try_number,
                trigger_id=trigger_id,
                consumer=consumer,
                handed=handed,
                now=now,
            )
            if tracing.enabled()
            else None,
        )


def _deadline_call(dag: SerializedDag, missed: Any) -> DeadlineCall | None:
    """A missed deadline's SyncCallback, from the run's DAG version (ADR 0037)."""
    if missed is None:
        return None
    alert = dag.deadlines[missed.alert_index]
    return DeadlineCall(
        path=alert.callback_path, kwargs=alert.callback_kwargs, context=deadlines.context(missed)
    )


def _try_traceparent(run: Run, row: TIRow) -> str | None:
    """A try that begins in the triggerer: its trigger runs are the try's children."""
    if not tracing.enabled():
        return None
    trace_id = tracing.run_trace_id(run.dag_id, run.run_id, run.id)
    return tracing.traceparent(trace_id, tracing.try_span_id(trace_id, row.id, row.try_number + 1))


def _mapped_lengths(
    conn: Connection, run_id: int, dag: SerializedDag, task: SerializedTask
) -> dict[str, int]:
    """Instance counts of an iterate task's mapped sources, for ``concat`` (the one
    combinator that must know where a mapped input ends)."""
    if task.iterate is None or not task.iterate.uses("concat"):
        return {}
    return {
        t: instance_count(conn, run_id, t) for t in task.iterate_sources if dag.task(t).is_mapped
    }
