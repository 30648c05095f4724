"""Decide what a DAG run needs next: a pure function of its task instances' states."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from tailrace.scheduler.trigger_rules import Decision, UpstreamCounts, evaluate
from tailrace.serialization import SerializedDag
from tailrace.state import FAILED_TI_STATES, FINISHED_TI_STATES, DagRunState
from tailrace.state import TaskInstanceState as TIS


@dataclass
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
class RunPlan:
    # Instances to finish without running: ti id -> skipped | upstream_failed.
    finish: dict[int, str] = field(default_factory=dict)
    # Instances whose dependencies are met, in topological order; slots permitting they run.
    ready: list[TIRow] = field(default_factory=list)
    # Unexpanded mapped tasks whose dependencies are met: the placeholder rows.
    expand: list[TIRow] = field(default_factory=list)
    # Set once every instance has finished.
    run_state: DagRunState | None = None


def _is_candidate(row: TIRow, state: str | None, now: datetime) -> bool:
    if state is None or state == TIS.SCHEDULED:
        return True
    return state == TIS.UP_FOR_RETRY and (row.next_retry_at is None or row.next_retry_at <= now)


def plan_run(dag: SerializedDag, tis: list[TIRow], now: datetime) -> RunPlan:
    by_task: dict[str, list[TIRow]] = defaultdict(list)
    for row in tis:
        by_task[row.task_id].append(row)
    state = {row.id: row.state for row in tis}
    plan = RunPlan()
    decided: set[str] = set()
    # Skips and failures cascade down the graph; tasks are topologically ordered, so one
    # pass sees every upstream decision made in this pass.
    for task in dag.tasks:
        rows = by_task.get(task.task_id, [])
        pending = [r for r in rows if _is_candidate(r, state[r.id], now)]
        if not pending or task.task_id in decided:
            continue
        upstream_states = [state[r.id] for up in task.upstream for r in by_task.get(up, [])]
        decision = evaluate(task.trigger_rule, UpstreamCounts.of(upstream_states))
        if decision is Decision.WAIT:
            continue
        decided.add(task.task_id)
        if decision is not Decision.READY:
            final = TIS.SKIPPED if decision is Decision.SKIP else TIS.UPSTREAM_FAILED
            for r in pending:
                state[r.id] = final
                plan.finish[r.id] = final
        elif task.is_mapped and len(rows) == 1 and rows[0].map_index == -1:
            plan.expand.append(rows[0])
        else:
            plan.ready.extend(pending)
    if not plan.expand and all(state[r.id] in FINISHED_TI_STATES for r in tis):
        leaves = {t.task_id for t in dag.tasks if not t.downstream}
        failed = any(state[r.id] in FAILED_TI_STATES for r in tis if r.task_id in leaves)
        plan.run_state = DagRunState.FAILED if failed else DagRunState.SUCCESS
    return plan


def retry_delay_seconds(
    base: float, try_number: int, exponential: bool, max_delay: float | None
) -> float:
    """Seconds to wait before try ``try_number + 1``; Airflow's exponential backoff."""
    delay = base * (2 ** (try_number - 1)) if exponential else base
    if max_delay is not None:
        delay = min(delay, max_delay)
    return max(0.0, delay)
