"""The scheduler's pass over the runs something happened in: load, plan, expand.

A pass reads each run a page at a time (unmapped instances, each mapped task's started
instances and a page of its unstarted ones, and for finished ones only which outcomes
exist), plans it (`_planner.plan_run`, a pure function), expands mapped and `.iterate()`
tasks, finishes what will not run, and returns a frozen `PassResult`: the instances
ready to dispatch and what the loop should look at next. It keeps no per-step flags;
what it carries between passes is caches (DAG versions, a complete mapped task's counts)
and counters for benchmarks.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol

import msgspec
from sqlalchemy import Connection, bindparam, exists, func, literal_column, select, union_all

from tailrace import metrics, tracing, transitions
from tailrace.db import is_postgres
from tailrace.db.models import DagRun, TaskInstance
from tailrace.scheduler._expand import expand_mapped
from tailrace.scheduler._iterate import Sources, expand_iterate
from tailrace.scheduler._planner import Hidden, Past, RunPlan, RunRows, TIRow, Unmapped, plan_run
from tailrace.scheduler.versions import DagVersions
from tailrace.serialization import SerializedDag
from tailrace.state import FINISHED_TI_STATES, DagRunState, RunType
from tailrace.state import TaskInstanceState as TIS
from tailrace.store.triggers import complete_triggers
from tailrace.tracing.owner import record_expansion, record_run

log = logging.getLogger(__name__)

_CHUNK = 500
# Instances an expansion creates before the pass first refreshes PostgreSQL's planner
# statistics (then again each time the count doubles).
ANALYZE_AFTER = 20_000


def _chunks(ids: Sequence[int]) -> Iterable[Sequence[int]]:
    for i in range(0, len(ids), _CHUNK):
        yield ids[i : i + _CHUNK]


class Run(msgspec.Struct):
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
    # After the run's fields: the versions of its unmapped instances (ADR 0046).
    DagRun.ti_version,
    DagRun.ti_reload_version,
).where(DagRun.id.in_(bindparam("ids", expanding=True)), DagRun.state == DagRunState.RUNNING)
_RUN_FIELDS = len(Run.__struct_fields__)
# Several schedulers: a pass plans the runs it could lock; another scheduler planning a
# run holds it (PostgreSQL; SQLite has one writer and ignores the clause).
_LOCK_RUNNING_RUNS = _RUNNING_RUNS.with_for_update(skip_locked=True, key_share=True)
# PostgreSQL: and the snapshot the runs were read in, with this transaction's id if it
# has one (ADR 0052). Taken before the instances are read: what it sees, they saw.
_LOCK_RUNNING_RUNS_SNAPSHOT = _LOCK_RUNNING_RUNS.add_columns(
    literal_column("pg_current_snapshot()::text"),
    literal_column("pg_current_xact_id_if_assigned()::text"),
)
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
# A kept run's unmapped instances that may have changed since the version it was read
# at, each after its own version (`Version.sees` decides).
_UNMAPPED_SINCE = select(TaskInstance.row_version, *_TI_COLUMNS).where(
    TaskInstance.dag_run_id == bindparam("run"),
    TaskInstance.map_index == -1,
    TaskInstance.row_version > bindparam("since"),
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
    .subquery()
)
# Both in one statement: a step that plans a running mapped task reads it once.
_STARTED_AND_UNSTARTED = union_all(_STARTED, select(*_UNSTARTED.c))
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
# While a mapped task runs, trigger rules need only know which outcomes exist so far: one
# statement of an EXISTS per outcome, each an index probe.
_OUTCOMES_SO_FAR = select(
    *(
        exists()
        .where(
            TaskInstance.dag_run_id == bindparam("run"),
            TaskInstance.task_id == bindparam("task"),
            TaskInstance.state == state,
            TaskInstance.map_index >= 0,
        )
        .label(state)
        for state in _FINISHED
    )
)

# Instances running per (run, task), and per run under the task id "".
ActiveCounts = Mapping[tuple[int, str], int]


@dataclass(frozen=True)
class PassResult:
    """What a pass decided, for dispatch and the next step."""

    # Ready instances, in each run's topological order.
    candidates: tuple[tuple[Run, TIRow], ...] = ()
    active: ActiveCounts = field(default_factory=dict)
    # Runs whose instances changed so that they must be planned again (expansions,
    # instances finished without running), or that another scheduler held.
    replan: frozenset[int] = frozenset()
    contended: frozenset[int] = frozenset()
    # Runs with unstarted instances this pass did not read: read them next.
    more_unstarted: frozenset[int] = frozenset()
    finished_runs: frozenset[int] = frozenset()
    # The DAGs of those runs (one ending frees a max_active_runs slot), and whether a DAG
    # callback was recorded for one.
    finished_dags: frozenset[str] = frozenset()
    callbacks_recorded: bool = False
    # Instances a dagrun_timeout skipped while their tries were queued or running: stop them.
    terminate: tuple[int, ...] = ()
    # Triggers were cancelled (deferred instances of a timed-out run).
    triggers_changed: bool = False
    # Runs with instances held back by depends_on_past, by DAG; and the DAGs with other
    # runs planned this pass (whose change may release them).
    waiting_on_past: Mapping[str, frozenset[int]] = field(default_factory=dict)
    touched_dags: frozenset[str] = frozenset()


class Version(Protocol):
    """What a run's kept rows are as of (ADR 0046, 0052)."""

    def since(self) -> int:
        """Rows whose ``row_version`` is at most this are seen: read back the others."""

    def sees(self, row_version: int) -> bool:
        """Whether a row (or a reload) stamped ``row_version`` is in what was read."""


@dataclass(frozen=True, slots=True)
class Counter:
    """SQLite: the run's ``ti_version``, final while the step's write lock is held."""

    value: int

    def since(self) -> int:
        return self.value

    def sees(self, row_version: int) -> bool:
        return row_version <= self.value


@dataclass(frozen=True, slots=True)
class Snapshot:
    """PostgreSQL: the snapshot a pass read a run in (``pg_current_snapshot()``), whose
    stamps are transaction ids. It sees a transaction that committed before it was taken:
    below ``xmin``, or below ``xmax`` and not ``running``; never its own transaction
    (``own``), whose writes came after the read."""

    xmin: int
    xmax: int
    running: frozenset[int]
    own: int | None

    @classmethod
    def parse(cls, snapshot: str, own: str | None) -> Snapshot:
        xmin, xmax, running = snapshot.split(":")
        return cls(
            int(xmin),
            int(xmax),
            frozenset(int(x) for x in running.split(",") if x),
            int(own) if own is not None else None,
        )

    def since(self) -> int:
        return min(self.xmin, self.own if self.own is not None else self.xmin) - 1

    def sees(self, row_version: int) -> bool:
        return row_version != self.own and (
            row_version < self.xmin or (row_version < self.xmax and row_version not in self.running)
        )


@dataclass(slots=True)
class _Kept:
    # Which run: its id may be another's once it is deleted (SQLite reuses the largest).
    identity: tuple[str, str, datetime | None]
    version: Version  # what ``rows`` are as of
    rows: Unmapped


def _identity(run: Run) -> tuple[str, str, datetime | None]:
    return run.dag_id, run.run_id, run.start_date


class KeptRuns:
    """Runs' unmapped instances kept between passes (ADR 0046, 0052): a pass reads a kept
    run's rows that changed since the version it kept (``task_instance.row_version``,
    stamped by triggers: SQLite's counter, PostgreSQL's transaction id), not all of them.
    Rows an expansion or a delete took out of the run make it read them all again
    (``ti_reload_version``). They are kept indexed for the planner (ADR 0054), a changed
    row put in its place. Kept rows are never changed in place, and a step whose
    transaction failed forgets them all (`forget`): what was read in it may not have been
    committed."""

    def __init__(self, limit: int = 1_000) -> None:
        self.limit = limit
        self._runs: OrderedDict[int, _Kept] = OrderedDict()
        self.reads = self.full_reads = 0  # for tests and benchmarks

    def __len__(self) -> int:
        return len(self._runs)

    def rows(
        self, conn: Connection, run: Run, version: Version, reload_version: int
    ) -> Unmapped | None:
        """The run's unmapped rows as of ``version``; None if they must all be read."""
        run_id = run.id
        kept = self._runs.get(run_id)
        if kept is None or not kept.version.sees(reload_version) or kept.identity != _identity(run):
            return None
        self.reads += 1
        if version != kept.version:
            was = kept.version
            for row_version, _, *fields in conn.execute(
                _UNMAPPED_SINCE, {"run": run_id, "since": was.since()}
            ):
                if not was.sees(row_version):
                    kept.rows.put(TIRow(*fields))
            kept.version = version
        self._runs.move_to_end(run_id)
        return kept.rows

    def keep(self, run: Run, version: Version, rows: Unmapped) -> None:
        self.full_reads += 1
        self._runs[run.id] = _Kept(_identity(run), version, rows)
        self._runs.move_to_end(run.id)
        while len(self._runs) > self.limit:
            self._runs.popitem(last=False)

    def forget(self, run_ids: Iterable[int] | None = None) -> None:
        """Forget these runs (ended, or no longer running), or every run."""
        if run_ids is None:
            self._runs.clear()
            return
        for run_id in run_ids:
            self._runs.pop(run_id, None)


class RunPass:
    """Plans runs; holds caches and counters across passes, never per-step flags."""

    def __init__(self, versions: DagVersions, *, page: int, expansion_batch: int) -> None:
        self.versions = versions
        # Per pass and mapped task: unstarted instances read, iterate instances created.
        self.page = page
        self.expansion_batch = max(1, expansion_batch)
        self.expanded = 0  # iterate instances created, for benchmarks and the curious
        self._expanded_at_analyze = 0
        self._complete_counts: dict[tuple[int, str], dict[str, int]] = {}
        self.kept = KeptRuns()

    def forget_counts(self) -> None:
        """A clear or mark elsewhere may have reopened a complete mapped task."""
        self._complete_counts.clear()

    def forget(self) -> None:
        """The step's transaction failed: what this pass read or kept may not be true."""
        self._complete_counts.clear()
        self.kept.forget()

    def dag(self, conn: Connection, version_id: int) -> SerializedDag:
        return self.versions.get(conn, version_id)[0]

    def __call__(
        self,
        conn: Connection,
        run_ids: Sequence[int],
        now: datetime,
        free_slots: Callable[[], int] | None = None,
    ) -> PassResult:
        """Plan the runs. ``free_slots`` (asked once a mapped task has unstarted instances)
        bounds the page of them read: no more can start this step, and one over tells
        dispatch that the run waits for a slot."""
        runs, tis, hidden, contended = self._load(conn, sorted(run_ids), free_slots)
        finish: dict[int, str] = {}
        candidates: list[tuple[Run, TIRow]] = []
        active: dict[tuple[int, str], int] = defaultdict(int)
        replan: set[int] = set()
        more_unstarted: set[int] = set()
        finished_runs: dict[int, str] = {}
        callbacks_recorded = False
        terminate: list[int] = []
        cancelled: list[int] = []
        waiting_on_past: dict[str, set[int]] = defaultdict(set)
        touched_dags: set[str] = set()
        for run in runs.values():
            dag = self.dag(conn, run.dag_version_id)
            rows = tis[run.id]
            if timed_out(dag, run.start_date, now):
                skipped = _time_out(conn, run, dag, now)
                terminate.extend(ti_id for ti_id, _ in skipped)
                cancelled.extend(trigger_id for _, trigger_id in skipped if trigger_id)
                finished_runs[run.id] = run.dag_id
                callbacks_recorded |= dag.has_on_failure_callback
                continue
            plan, rows = self._plan(conn, run, dag, rows, hidden[run.id], now)
            if plan.finish:
                replan.add(run.id)  # finishing without running may release downstream
            if plan.waiting_on_past:
                waiting_on_past[run.dag_id].add(run.id)
            else:
                touched_dags.add(run.dag_id)
            if plan.iterate and self._expand_iterate(conn, run, dag, plan.iterate, now):
                replan.add(run.id)  # new instances (or more items): plan them next
            finish.update(plan.finish)
            for task_id, state in plan.finish_tasks.items():
                transitions.finish_unstarted(conn, run.id, task_id, state, now)
            if plan.run_state is not None:
                callbacks_recorded |= _finish_run(conn, run, dag, plan.run_state, now)
                finished_runs[run.id] = run.dag_id
                continue
            for task_id in rows.active():
                active[(run.id, "")] += 1
                active[(run.id, task_id)] += 1
            candidates.extend((run, r) for r in plan.ready)
            if plan.finish_tasks or any(h.more for h in hidden[run.id].values()):
                more_unstarted.add(run.id)
        complete_triggers(conn, cancelled)
        self.kept.forget(finished_runs)
        if finish:
            # Finishing without running may complete the run or release downstream tasks:
            # the runs are planned again (``replan``, above).
            transitions.finish_unrun(conn, finish, now)
        return PassResult(
            candidates=tuple(candidates),
            active=active,
            replan=frozenset(replan),
            contended=frozenset(contended),
            more_unstarted=frozenset(more_unstarted),
            finished_runs=frozenset(finished_runs),
            finished_dags=frozenset(finished_runs.values()),
            callbacks_recorded=callbacks_recorded,
            terminate=tuple(terminate),
            triggers_changed=bool(cancelled),
            waiting_on_past={d: frozenset(r) for d, r in waiting_on_past.items()},
            touched_dags=frozenset(touched_dags),
        )

    def _plan(
        self,
        conn: Connection,
        run: Run,
        dag: SerializedDag,
        rows: RunRows,
        hidden: dict[str, Hidden],
        now: datetime,
    ) -> tuple[RunPlan, RunRows]:
        """The run's plan, after expanding the mapped tasks it made ready."""
        past = _past(conn, run, dag)
        plan = plan_run(dag, rows, now, hidden, past)
        while plan.expand:
            # Rare (once per mapped task): the run's rows as a list, and indexed afresh.
            listed = rows.all()
            for placeholder in plan.expand:
                began = datetime.now(UTC)
                listed = expand_mapped(
                    conn, run.id, run.dag_id, run.run_id, dag, placeholder, listed, now
                )
                if tracing.enabled():
                    created = sum(1 for r in listed if r.task_id == placeholder.task_id)
                    _expansion_span(run, placeholder.task_id, "expand", created, began)
            rows = RunRows.of(listed)
            plan = plan_run(dag, rows, now, hidden, past)
        return plan, rows

    def _load(
        self, conn: Connection, run_ids: list[int], free_slots: Callable[[], int] | None
    ) -> tuple[dict[int, Run], dict[int, RunRows], dict[int, dict[str, Hidden]], set[int]]:
        """Running runs, the instances a pass needs, a summary of the rest, and the runs
        another scheduler holds."""
        page = None
        runs: dict[int, Run] = {}
        versions: dict[int, tuple[Version, int]] = {}
        tis: dict[int, RunRows] = {}
        hidden: dict[int, dict[str, Hidden]] = defaultdict(dict)
        contended: set[int] = set()
        postgres = is_postgres(conn)
        lock = _LOCK_RUNNING_RUNS_SNAPSHOT if postgres else _LOCK_RUNNING_RUNS
        for chunk in _chunks(run_ids):
            for r in conn.execute(lock, {"ids": chunk}):
                runs[r.id] = Run(*r[:_RUN_FIELDS])
                version = Snapshot.parse(r[-2], r[-1]) if postgres else Counter(r.ti_version)
                versions[r.id] = (version, r.ti_reload_version)
            missing = [i for i in chunk if i not in runs]
            if missing and postgres:
                contended.update(conn.scalars(_STILL_RUNNING, {"ids": missing}))
            if missing:
                self.kept.forget(missing)
        self._unmapped(conn, [runs[i] for i in run_ids if i in runs], versions, tis)
        for run in runs.values():
            mapped = self.dag(conn, run.dag_version_id).mapped_tasks()
            if not mapped:
                continue
            # Placeholders still to expand (or expanding): their task is not complete.
            expanding = tis[run.id].unmapped.unfinished
            for task in mapped:
                key = {"run": run.id, "task": task.task_id}
                if page is None:
                    page = self.page if free_slots is None else self._page(free_slots())
                found = conn.execute(_STARTED_AND_UNSTARTED, {**key, "limit": page + 1}).all()
                started = [TIRow(*t[1:]) for t in found if t.state is not None]
                unstarted = sorted(
                    (TIRow(*t[1:]) for t in found if t.state is None), key=lambda r: r.map_index
                )
                tis[run.id].mapped.extend(started)
                tis[run.id].mapped.extend(unstarted[:page])
                complete = not (started or unstarted or task.task_id in expanding)
                hidden[run.id][task.task_id] = Hidden(
                    self._finished_counts(conn, run.id, task.task_id, complete=complete),
                    more=len(unstarted) > page,
                )
        return runs, tis, hidden, contended

    def _unmapped(
        self,
        conn: Connection,
        runs: list[Run],
        versions: Mapping[int, tuple[Version, int]],
        tis: dict[int, RunRows],
    ) -> None:
        """The runs' unmapped instances into ``tis``: what changed in the kept ones (ADR
        0046, 0052), the rest read whole."""
        unread: list[Run] = []
        for run in runs:
            kept = self.kept.rows(conn, run, *versions[run.id])
            if kept is None:
                unread.append(run)
                tis[run.id] = RunRows(Unmapped())
            else:
                tis[run.id] = RunRows(kept)
        for chunk in _chunks([run.id for run in unread]):
            # Fetched at once: row by row costs a third more on a 200-task run.
            for t in conn.execute(_UNMAPPED_TIS, {"ids": chunk}).all():
                tis[t[0]].unmapped.put(TIRow(*t[1:]))
        for run in unread:
            self.kept.keep(run, versions[run.id][0], tis[run.id].unmapped)

    def _page(self, free_slots: int) -> int:
        # One more than can start: dispatch finds it no slot and the run waits for one
        # (planned again when a try ends) instead of being planned again at once.
        return max(1, min(self.page, free_slots + 1))

    def _finished_counts(
        self, conn: Connection, run_id: int, task_id: str, *, complete: bool
    ) -> dict[str, int]:
        """A mapped task's finished instances by state: exact once the task is complete
        (cached until something outside the scheduler may change it), else 1 for each
        outcome that exists — all a trigger rule needs while instances are unfinished."""
        key = {"run": run_id, "task": task_id}
        if not complete:
            found = conn.execute(_OUTCOMES_SO_FAR, key).one()
            return {str(s): 1 for s, there in zip(_FINISHED, found, strict=True) if there}
        counts = self._complete_counts.get((run_id, task_id))
        if counts is None:
            counts = {str(s): n for s, n in conn.execute(_FINISHED_MAPPED, key)}
            self._complete_counts[(run_id, task_id)] = counts
        return counts

    def _expand_iterate(
        self,
        conn: Connection,
        run: Run,
        dag: SerializedDag,
        placeholders: list[TIRow],
        now: datetime,
    ) -> bool:
        """Create the instances of iterate tasks whose items arrived; True if any changed."""
        sources = Sources(conn, run.id, dag.task)
        changed = False
        for placeholder in placeholders:
            task = dag.task(placeholder.task_id)
            began = time.perf_counter()
            began_at = datetime.now(UTC)
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
            if done.created:
                m = metrics.get()
                m.iterate_instances_created.labels(run.dag_id, task.task_id).inc(done.created)
                m.iterate_expansion_pass_instances.labels(run.dag_id, task.task_id).observe(
                    done.created
                )
                m.iterate_expansion_pass_duration.labels(run.dag_id, task.task_id).observe(
                    time.perf_counter() - began
                )
            if done.created and tracing.enabled():
                _expansion_span(run, task.task_id, "iterate", done.created, began_at)
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


def _time_out(
    conn: Connection, run: Run, dag: SerializedDag, now: datetime
) -> list[tuple[int, int | None]]:
    skipped = transitions.time_out_run(conn, run.id, now, callback=dag.has_on_failure_callback)
    log.info(
        "run %s of %s timed out after its dagrun_timeout of %gs: failed, %d unfinished task "
        "instances skipped",
        run.run_id,
        run.dag_id,
        dag.dagrun_timeout,
        len(skipped),
    )
    _run_finished(run, DagRunState.FAILED, now)
    return skipped


def _past(conn: Connection, run: Run, dag: SerializedDag) -> Past | None:
    """The previous run's instances of the tasks ``depends_on_past`` looks at; None when
    no task uses it or this is the first run. The previous run is Airflow's: the latest
    logical date before this run's — of scheduled (and backfill) runs only, with ``catchup``."""
    needed = {t.task_id for t in dag.tasks if t.depends_on_past}
    if not needed or run.logical_date is None:
        return None
    for task_id in list(needed):
        if dag.task(task_id).wait_for_downstream:
            needed.update(dag.task(task_id).downstream)
    query = select(DagRun.id).where(
        DagRun.dag_id == run.dag_id, DagRun.logical_date < run.logical_date
    )
    if dag.catchup:
        query = query.where(DagRun.run_type.in_([RunType.SCHEDULED, RunType.BACKFILL]))
    previous = conn.scalar(query.order_by(DagRun.logical_date.desc(), DagRun.id.desc()).limit(1))
    if previous is None:
        return None
    rows = conn.execute(
        select(TaskInstance.task_id, TaskInstance.map_index, TaskInstance.state).where(
            TaskInstance.dag_run_id == previous, TaskInstance.task_id.in_(sorted(needed))
        )
    )
    return Past({(r.task_id, r.map_index): r.state for r in rows})


def timeout_deadline(dag: SerializedDag, start_date: datetime | None) -> datetime | None:
    """When a run of ``dag`` that started at ``start_date`` times out (dagrun_timeout)."""
    if dag.dagrun_timeout is None or start_date is None:
        return None
    return start_date + timedelta(seconds=dag.dagrun_timeout)


def timed_out(dag: SerializedDag, start_date: datetime | None, now: datetime) -> bool:
    deadline = timeout_deadline(dag, start_date)
    return deadline is not None and deadline <= now


def _finish_run(
    conn: Connection, run: Run, dag: SerializedDag, state: DagRunState, now: datetime
) -> bool:
    """The run ends; whether a DAG callback was recorded for a worker to run."""
    callback = (
        dag.has_on_success_callback if state == DagRunState.SUCCESS else dag.has_on_failure_callback
    )
    # A run has deadlines only if its version declared some (they are made with the run).
    ended = transitions.finish_run(
        conn, run.id, state, now, callback=callback, has_deadlines=bool(dag.deadlines)
    )
    if ended:
        _run_finished(run, state, now)
    return ended and callback


def _run_finished(run: Run, state: DagRunState, now: datetime) -> None:
    """What a run's end tells the outside: its duration metric, its trace, the log line."""
    if run.start_date is not None:
        seconds = (now - run.start_date).total_seconds()
        metrics.get().dagrun_duration.labels(run.dag_id, state.value).observe(seconds)
    if tracing.enabled():
        record_run(
            dag_run_id=run.id,
            dag_id=run.dag_id,
            run_id=run.run_id,
            state=state.value,
            start=run.start_date,
            end=now,
        )
    log.info(
        "run %s of %s finished: %s",
        run.run_id,
        run.dag_id,
        state.value,
        extra={"dag_id": run.dag_id, "run_id": run.run_id},
    )


def _expansion_span(run: Run, task_id: str, kind: str, created: int, began: datetime) -> None:
    record_expansion(
        dag_run_id=run.id,
        dag_id=run.dag_id,
        run_id=run.run_id,
        task_id=task_id,
        kind=kind,
        created=created,
        start=began,
        end=datetime.now(UTC),
    )
