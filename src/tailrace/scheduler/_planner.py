"""Decide what a DAG run needs next: a pure function of its task instances' states."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial

from tailrace.scheduler.trigger_rules import Decision, UpstreamCounts, evaluate
from tailrace.sdk import TriggerRule
from tailrace.serialization import SerializedDag, SerializedTask
from tailrace.state import ACTIVE_TI_STATES, FAILED_TI_STATES, FINISHED_TI_STATES, DagRunState
from tailrace.state import TaskInstanceState as TIS


@dataclass(slots=True)
class TIRow:
    id: int
    task_id: str
    map_index: int
    state: str | None
    try_number: int = 0
    max_tries: int = 0
    next_retry_at: datetime | None = None
    # Set while a deferred try waits to resume: resuming is not a new try.
    next_method: str | None = None


@dataclass
class Hidden:
    """Mapped instances of a task that the pass did not load (a run may hold millions):
    the finished ones counted by state, and whether unstarted ones remain unloaded."""

    counts: dict[str, int] = field(default_factory=dict)
    more: bool = False


@dataclass(frozen=True)
class Past:
    """The previous run's instances, for tasks with ``depends_on_past``: state by
    (task id, map index). No ``Past`` at all: this is the DAG's first run."""

    states: dict[tuple[str, int], str | None] = field(default_factory=dict)


# A previous instance in one of these lets ``depends_on_past`` pass, as in Airflow.
_PAST_OK = (TIS.SUCCESS, TIS.SKIPPED)


def _past_allows(dag: SerializedDag, task_id: str, map_index: int, past: Past) -> bool:
    """Airflow's PrevDagrunDep: the same instance in the previous run succeeded or was
    skipped (an instance it did not have — a task added since — does not hold it back),
    and with ``wait_for_downstream`` so did that instance's direct downstream ones."""
    task = dag.task(task_id)
    previous = past.states.get((task_id, map_index), _PAST_OK[0])
    if previous not in _PAST_OK:
        return False
    if task.wait_for_downstream:
        return all(
            state in _PAST_OK
            for (other, _), state in past.states.items()
            if other in task.downstream
        )
    return True


def _not_held_by_past(
    plan: RunPlan, dag: SerializedDag, task_id: str, pending: list[TIRow], past: Past
) -> list[TIRow]:
    allowed = [r for r in pending if _past_allows(dag, task_id, r.map_index, past)]
    if len(allowed) < len(pending):
        plan.waiting_on_past = True
    return allowed


@dataclass
class RunPlan:
    # Instances to finish without running: ti id -> skipped | upstream_failed.
    finish: dict[int, str] = field(default_factory=dict)
    # Instances whose dependencies are met, in topological order; slots permitting they run.
    ready: list[TIRow] = field(default_factory=list)
    # Unexpanded mapped tasks whose dependencies are met: the placeholder rows.
    expand: list[TIRow] = field(default_factory=list)
    # ``.iterate()`` tasks still expanding whose other dependencies are met: placeholders.
    iterate: list[TIRow] = field(default_factory=list)
    # Mapped tasks whose unloaded unstarted instances finish too: task id -> state.
    finish_tasks: dict[str, str] = field(default_factory=dict)
    # Set once every instance has finished.
    run_state: DagRunState | None = None
    # Some ready instances wait for the previous run (depends_on_past).
    waiting_on_past: bool = False


# An instance in one of these may be ready; one up for retry once its delay is over.
_UNSTARTED = frozenset({None, TIS.SCHEDULED})


def _finish(
    plan: RunPlan,
    task_id: str,
    pending: list[TIRow],
    decision: Decision,
    state: dict[int, str | None],
    hidden: dict[str, Hidden],
) -> None:
    """Finish a task's pending instances without running them (skipped, upstream_failed)."""
    final = TIS.SKIPPED if decision is Decision.SKIP else TIS.UPSTREAM_FAILED
    for r in pending:
        state[r.id] = final
        plan.finish[r.id] = final
    unloaded = hidden.get(task_id)
    if unloaded is not None and unloaded.more:
        plan.finish_tasks[task_id] = final
        hidden[task_id] = Hidden({**unloaded.counts, final: 1})


class Unmapped:
    """A run's unmapped instances (one per task: a placeholder, or the task's only
    instance) indexed for planning. The pass keeps it between passes and `put`s the rows
    that changed (ADR 0054): a pass over a wide run then costs what changed, not the run.
    Its parts are replaced, never changed, while a plan reads them (a plan copies what it
    changes)."""

    __slots__ = ("active", "by_task", "done", "pending", "retrying", "state", "unfinished")

    def __init__(self, rows: Iterable[TIRow] = ()) -> None:
        self.by_task: dict[str, list[TIRow]] = {}
        self.state: dict[int, str | None] = {}
        # Unstarted, by task; up for retry (due or not: a plan decides by its ``now``).
        self.pending: dict[str, list[TIRow]] = {}
        self.retrying: dict[str, TIRow] = {}
        # Tasks whose instance a trigger rule counts as done; whose instance is active.
        self.done: set[str] = set()
        self.active: set[str] = set()
        # Instances not finished: once a plan has finished them all, the run may be over.
        self.unfinished: dict[str, TIRow] = {}
        for row in rows:
            self.put(row)

    def put(self, row: TIRow) -> None:
        """The task's instance is now ``row`` (new, or changed)."""
        task_id, s = row.task_id, row.state
        old = self.by_task.get(task_id)
        if old is not None:
            if old[0].id != row.id:
                del self.state[old[0].id]
            self.pending.pop(task_id, None)
            self.retrying.pop(task_id, None)
            self.unfinished.pop(task_id, None)
            self.done.discard(task_id)
            self.active.discard(task_id)
        self.by_task[task_id] = [row]
        self.state[row.id] = s
        if s in _UNSTARTED:
            self.pending[task_id] = [row]
        elif s == TIS.UP_FOR_RETRY:
            self.retrying[task_id] = row
        elif s in _COUNTED_DONE:
            self.done.add(task_id)
        if s in ACTIVE_TI_STATES:
            self.active.add(task_id)
        if s not in FINISHED_TI_STATES:
            self.unfinished[task_id] = row

    def rows(self) -> list[TIRow]:
        return [rows[0] for rows in self.by_task.values()]


@dataclass(slots=True)
class RunRows:
    """The instances a pass loaded of one run: its unmapped ones (kept between passes,
    or read whole) and its mapped tasks' started ones and page of unstarted ones."""

    unmapped: Unmapped
    mapped: list[TIRow] = field(default_factory=list)

    @classmethod
    def of(cls, rows: Iterable[TIRow]) -> RunRows:
        unmapped, mapped = Unmapped(), []
        for row in rows:
            if row.map_index < 0:
                unmapped.put(row)
            else:
                mapped.append(row)
        return cls(unmapped, mapped)

    def all(self) -> list[TIRow]:
        return [*self.unmapped.rows(), *self.mapped]

    def active(self) -> Iterator[str]:
        """The task id of each active instance."""
        yield from self.unmapped.active
        yield from (r.task_id for r in self.mapped if r.state in ACTIVE_TI_STATES)


def _due(row: TIRow, now: datetime) -> bool:
    """An instance up for retry may be tried again: its delay is over."""
    return row.next_retry_at is None or row.next_retry_at <= now


class _Rows:
    """A plan's view of a run's instances: the kept index's parts as they are, copied
    only where the plan changes them (state, done) or the pass's mapped instances and
    due retries add to them."""

    __slots__ = ("by_task", "done", "pending", "state", "unfinished")

    def __init__(self, rows: RunRows, now: datetime) -> None:
        kept = rows.unmapped
        due = [r for r in kept.retrying.values() if _due(r, now)]
        self.state = dict(kept.state)
        self.done = set(kept.done)
        self.unfinished: list[Iterable[TIRow]] = [kept.unfinished.values()]
        if not rows.mapped and not due:
            self.by_task, self.pending = kept.by_task, kept.pending
            return
        by_task, pending = dict(kept.by_task), dict(kept.pending)
        for r in due:
            pending[r.task_id] = [r]  # a task's one unmapped instance: not also unstarted
        added: dict[str, list[TIRow]] = defaultdict(list)
        added_pending: dict[str, list[TIRow]] = defaultdict(list)
        state, done = self.state, self.done
        for row in rows.mapped:  # locals, not attributes: a page of mapped instances
            s = row.state
            added[row.task_id].append(row)
            state[row.id] = s
            if s in _UNSTARTED or (s == TIS.UP_FOR_RETRY and _due(row, now)):
                added_pending[row.task_id].append(row)
            elif s in _COUNTED_DONE:
                done.add(row.task_id)
        for task_id, extra in added.items():
            by_task[task_id] = [*by_task.get(task_id, ()), *extra]
        for task_id, extra in added_pending.items():
            pending[task_id] = [*pending.get(task_id, ()), *extra]
        self.unfinished.append(rows.mapped)
        self.by_task, self.pending = by_task, pending

    def counts(self, upstream: list[str], hidden: Mapping[str, Hidden]) -> UpstreamCounts:
        """The upstream tasks' instances by state, the loaded and the ``hidden`` ones."""
        state, by_task = self.state, self.by_task
        counts = UpstreamCounts.of(state[r.id] for up in upstream for r in by_task.get(up, []))
        for up in upstream:
            if up in hidden:
                counts = counts.plus(hidden[up].counts, unfinished=int(hidden[up].more))
        return counts

    def all_finished(self) -> bool:
        """Every instance has finished, those the plan finished included."""
        state = self.state
        return all(state[r.id] in FINISHED_TI_STATES for rows in self.unfinished for r in rows)


def plan_run(
    dag: SerializedDag,
    tis: RunRows | list[TIRow],
    now: datetime,
    hidden: dict[str, Hidden] | None = None,
    past: Past | None = None,
) -> RunPlan:
    """What to do next in a run, from its loaded instances, the ``hidden`` summary and,
    for ``depends_on_past`` tasks, the previous run's instances (``past``)."""
    hidden = dict(hidden or {})
    rows_of = _Rows(tis if isinstance(tis, RunRows) else RunRows.of(tis), now)
    by_task, state, done, pending_of = rows_of.by_task, rows_of.state, rows_of.done, rows_of.pending
    plan = RunPlan()
    decided: set[str] = set()

    counts_of = partial(rows_of.counts, hidden=hidden)
    # Skips and failures cascade down the graph; tasks are topologically ordered, so one
    # pass sees every upstream decision made in this pass.
    # (A task's pending instances are found before the loop: finishing a task below
    # changes only its own instances' states.)
    # Only tasks with pending instances have anything to decide: often few of many.
    tasks = dag.in_order(pending_of) if len(pending_of) * 4 < len(dag.tasks) else dag.tasks
    for task in tasks:
        pending = pending_of.get(task.task_id)
        if not pending or task.task_id in decided:
            continue
        rows = by_task[task.task_id]
        upstream = _gating(task)
        if not upstream:
            decision = Decision.READY  # every rule is met (a wide run's tasks, every pass)
        elif _nothing_done_upstream(task, upstream, done, by_task, hidden):
            continue  # waits, without counting
        else:
            decision = _decide(dag, task, upstream, counts_of)
        if decision is Decision.WAIT:
            continue
        if decision is Decision.READY and task.depends_on_past and past is not None:
            pending = _not_held_by_past(plan, dag, task.task_id, pending, past)
            if not pending:
                continue
        decided.add(task.task_id)
        if decision is not Decision.READY:
            _finish(plan, task.task_id, pending, decision, state, hidden)
            done.add(task.task_id)
        else:
            _ready(plan, task, rows, pending)
    if not plan.expand:
        plan.run_state = _run_state(dag, rows_of, hidden)
    return plan


def _gating(task: SerializedTask) -> list[str]:
    """The upstream tasks that gate ``task``: an iterate task takes its sources' items as
    they come, so only its other upstream tasks do."""
    if not task.iterate_sources:
        return task.upstream
    return [u for u in task.upstream if u not in task.iterate_sources]


# What `UpstreamCounts.done` counts; and the rules that wait while it is 0 (all but
# "always": with no upstream instance done, each rule waits).
_COUNTED_DONE = frozenset({TIS.SUCCESS, TIS.SKIPPED, TIS.FAILED, TIS.UPSTREAM_FAILED, TIS.REMOVED})
_WAIT_UNTIL_ONE_DONE = frozenset(TriggerRule) - {TriggerRule.ALWAYS}


def _nothing_done_upstream(
    task: SerializedTask,
    upstream: list[str],
    done: set[str],
    by_task: Mapping[str, list[TIRow]],
    hidden: Mapping[str, Hidden],
) -> bool:
    """The task waits without counting: its upstream instances exist and none is done
    (what `evaluate` decides then, for every rule but "always")."""
    if task.trigger_rule not in _WAIT_UNTIL_ONE_DONE:
        return False
    # A loop, not two any() over generators: asked of most of a long chain, every pass.
    exists = False
    for u in upstream:
        if u in done or u in hidden:
            return False
        exists = exists or bool(by_task.get(u))
    return exists


def _ready(plan: RunPlan, task: SerializedTask, rows: list[TIRow], pending: list[TIRow]) -> None:
    """A task's pending instances may go: to run, to expand, or (iterate) both."""
    if task.iterate is not None:
        plan.iterate.extend(r for r in pending if r.map_index == -1)
        plan.ready.extend(r for r in pending if r.map_index >= 0)
    elif task.is_mapped and len(rows) == 1 and rows[0].map_index == -1:
        plan.expand.append(rows[0])
    else:
        plan.ready.extend(pending)


def _run_state(dag: SerializedDag, rows: _Rows, hidden: dict[str, Hidden]) -> DagRunState | None:
    """Once every instance has finished, the run's state: its leaves decide."""
    unfinished = any(h.more for h in hidden.values())
    if unfinished or not rows.all_finished():
        return None
    leaves = state_deciding_tasks(dag)
    state, by_task = rows.state, rows.by_task
    failed = any(
        state[r.id] in FAILED_TI_STATES for t in leaves for r in by_task.get(t, ())
    ) or any(hidden[t].counts.get(s, 0) for t in leaves if t in hidden for s in FAILED_TI_STATES)
    return DagRunState.FAILED if failed else DagRunState.SUCCESS


def _decide(
    dag: SerializedDag,
    task: SerializedTask,
    upstream: list[str],
    counts_of: Callable[[list[str]], UpstreamCounts],
) -> Decision:
    """The task's trigger rule over its upstream instances. A teardown whose upstream
    tasks are done runs if one of its setups succeeded (or it has none); its setups all
    skipped, it is skipped; else its setups failed (Airflow's ``all_done_setup_success``)."""
    decision = evaluate(task.trigger_rule, counts_of(upstream))
    if not task.is_teardown or decision is not Decision.READY:
        return decision
    setups = counts_of([u for u in upstream if dag.task(u).is_setup])
    if setups.total == 0 or setups.success:
        return Decision.READY
    if setups.skipped == setups.total:
        return Decision.SKIP
    return Decision.UPSTREAM_FAILED


def state_deciding_tasks(dag: SerializedDag) -> set[str]:
    """The tasks whose states decide a finished run's, as Airflow decides it: the leaves,
    where a teardown leaf gives way to its upstream tasks (its work) unless it has
    ``on_failure_fail_dagrun``; and every teardown that has it."""
    deciding = {t.task_id for t in dag.tasks if t.is_teardown and t.on_failure_fail_dagrun}
    stack = [t.task_id for t in dag.tasks if not t.downstream]
    seen: set[str] = set()
    while stack:
        task_id = stack.pop()
        if task_id in seen:
            continue
        seen.add(task_id)
        task = dag.task(task_id)
        if task.is_teardown and not task.on_failure_fail_dagrun:
            stack.extend(task.upstream)
        elif not task.is_teardown:
            deciding.add(task_id)
    return deciding


def retry_delay_seconds(
    base: float, try_number: int, exponential: bool, max_delay: float | None
) -> float:
    """Seconds to wait before try ``try_number + 1``; Airflow's exponential backoff."""
    delay = base * (2 ** (try_number - 1)) if exponential else base
    if max_delay is not None:
        delay = min(delay, max_delay)
    return max(0.0, delay)
