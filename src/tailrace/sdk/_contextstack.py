"""The DAGs and task groups currently open with ``with``: where new tasks are added."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tailrace.sdk._dag import DAG
    from tailrace.sdk._taskgroup import TaskGroup

_dag_stack: list[DAG] = []
_group_stack: list[TaskGroup] = []


def push_dag(dag: DAG) -> None:
    _dag_stack.append(dag)


def pop_dag() -> None:
    _dag_stack.pop()


def current_dag() -> DAG | None:
    """The innermost DAG opened with ``with DAG(...)``, if any."""
    return _dag_stack[-1] if _dag_stack else None


def push_group(group: TaskGroup) -> None:
    _group_stack.append(group)


def pop_group() -> None:
    _group_stack.pop()


def current_group(dag: DAG | None) -> TaskGroup | None:
    """The innermost open task group belonging to ``dag`` (else the DAG's root group)."""
    for group in reversed(_group_stack):
        if group.dag is dag:
            return group
    return dag.task_group if dag is not None else None
