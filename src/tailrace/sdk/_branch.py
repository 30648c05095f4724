"""Which downstream tasks a branching or short-circuiting task skips."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from tailrace.sdk.errors import DagDefinitionError

if TYPE_CHECKING:
    from tailrace.sdk._context import Context
    from tailrace.sdk._node import AbstractOperator


def _follow_ids(task: AbstractOperator, follow: str | Iterable[str] | None) -> set[str]:
    dag = task._require_dag()
    if follow is None:
        return set()
    wanted = {follow} if isinstance(follow, str) else set(follow)
    bad_types = [f for f in wanted if not isinstance(f, str)]
    if bad_types:
        raise TypeError(
            f"Branch task '{task.task_id}' must return task ids (str), a list of them or "
            f"None; got {bad_types!r}"
        )
    result: set[str] = set()
    for task_id in wanted:
        group = dag.task_group_dict.get(task_id)
        if group is not None:
            result.update(t.task_id for t in group.roots)
        elif task_id in dag.task_dict:
            result.add(task_id)
        else:
            raise DagDefinitionError(
                f"Branch task '{task.task_id}' chose '{task_id}', which is neither a task "
                f"nor a task group of DAG '{dag.dag_id}'",
                dag_id=dag.dag_id,
                task_id=task.task_id,
                hint="Return ids of tasks (or task groups) directly downstream of the branch.",
            )
    return result


def branch_skip_ids(task: AbstractOperator, follow: str | Iterable[str] | None) -> set[str]:
    """Direct downstream tasks of ``task`` that are not followed (task group ids mean the
    group's roots). A task reachable from a followed task is never skipped, so a join
    directly after the branch still runs."""
    dag = task._require_dag()
    followed = _follow_ids(task, follow)
    reachable: set[str] = set()
    for task_id in followed:
        reachable |= dag.get_task(task_id).get_flat_relative_ids(upstream=False)
    return {t for t in task.downstream_task_ids if t not in followed and t not in reachable}


def short_circuit_skip_ids(
    task: AbstractOperator, ignore_downstream_trigger_rules: bool
) -> set[str]:
    """All descendants of ``task`` (or only the direct downstream tasks, whose own trigger
    rules then decide about the rest)."""
    if ignore_downstream_trigger_rules:
        return task.get_flat_relative_ids(upstream=False)
    return set(task.downstream_task_ids)


class SkipMixin:
    """For operators that skip downstream tasks through the task instance."""

    def skip(self, context: Context, task_ids: Iterable[str]) -> None:
        """Ask the runtime to skip ``task_ids`` of this run."""
        ids = sorted(set(task_ids))
        if ids:
            context["ti"].skip_downstream_tasks(ids)
