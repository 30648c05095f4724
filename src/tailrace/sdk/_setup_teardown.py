"""Setup and teardown tasks: ``@setup``, ``@teardown``, and ``with`` a setup or teardown
task, which wires the tasks made in the block between it and its partner(s)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tailrace.sdk.errors import DagDefinitionError

if TYPE_CHECKING:
    from tailrace.sdk._node import AbstractOperator

# Per open scope: the task opened with ``with`` and the DAG's task ids at that moment.
_scopes: list[tuple[AbstractOperator, set[str]]] = []


def setup(python_callable: Callable[..., Any]) -> Any:
    """``@setup``: a ``@task`` (or an already decorated one, ``@setup @task.bash``) whose
    tasks are setup tasks, as :meth:`BaseOperator.as_setup` makes them."""
    decorator = _as_decorator(python_callable, "setup")
    decorator.is_setup = True
    return decorator


def teardown(
    python_callable: Callable[..., Any] | None = None, *, on_failure_fail_dagrun: bool = False
) -> Any:
    """``@teardown`` or ``@teardown(on_failure_fail_dagrun=True)``: a ``@task`` whose
    tasks are teardown tasks, as :meth:`BaseOperator.as_teardown` makes them."""

    def mark(function: Callable[..., Any]) -> Any:
        decorator = _as_decorator(function, "teardown")
        decorator.is_teardown = True
        decorator.on_failure_fail_dagrun = on_failure_fail_dagrun
        return decorator

    return mark if python_callable is None else mark(python_callable)


def _as_decorator(function: Callable[..., Any], what: str) -> Any:
    from tailrace.sdk._decorators import _TaskDecorator, task

    if isinstance(function, _TaskDecorator):
        return function.override()
    if getattr(function, "_is_task_group_factory", False):
        raise DagDefinitionError(
            f"@{what} cannot mark a task group", hint=f"Put @{what} on a task inside the group."
        )
    if not callable(function):
        raise TypeError(f"@{what} decorates a function, got {function!r}")
    return task(function)


def check_setup_teardown(task: AbstractOperator, *, dag_id: str) -> None:
    """A task is a setup or a teardown, not both; a teardown keeps its trigger rule."""
    if task.is_setup and task.is_teardown:
        raise DagDefinitionError(
            f"Task '{task.task_id}' is marked both setup and teardown",
            dag_id=dag_id,
            task_id=task.task_id,
            hint="A task is either a setup or a teardown: remove one of the marks.",
        )
    if task.is_teardown and str(task.trigger_rule) != "all_done_setup_success":
        raise DagDefinitionError(
            f"Teardown task '{task.task_id}' has trigger_rule={str(task.trigger_rule)!r}",
            dag_id=dag_id,
            task_id=task.task_id,
            field="trigger_rule",
            hint="Teardown tasks use all_done_setup_success (as in Airflow): remove the "
            "trigger_rule, or do not mark the task as a teardown.",
        )
    if task.is_setup and str(task.trigger_rule) != "all_success":
        raise DagDefinitionError(
            f"Setup task '{task.task_id}' has trigger_rule={str(task.trigger_rule)!r}",
            dag_id=dag_id,
            task_id=task.task_id,
            field="trigger_rule",
            hint="Setup tasks use all_success (as in Airflow): remove the trigger_rule.",
        )


def enter_scope(task: AbstractOperator) -> None:
    if not (task.is_setup or task.is_teardown) or task.dag is None:
        raise DagDefinitionError(
            f"Task '{task.task_id}' was used as a context manager, but only setup and "
            "teardown tasks of a DAG can be",
            task_id=task.task_id,
            hint="Mark it with .as_setup() or .as_teardown(setups=...) first.",
        )
    _scopes.append((task, set(task.dag.task_dict)))


def exit_scope(task: AbstractOperator) -> None:
    opened, before = _scopes.pop()
    assert opened is task, "setup/teardown scopes closed out of order"
    dag = task.dag
    assert dag is not None
    if task.is_teardown:
        setups = [dag.task_dict[t] for t in task.upstream_task_ids if dag.task_dict[t].is_setup]
        teardowns = [task]
    else:
        setups = [task]
        teardowns = [
            dag.task_dict[t] for t in task.downstream_task_ids if dag.task_dict[t].is_teardown
        ]
    partners = {t.task_id for t in (*setups, *teardowns)}
    new = [t for t_id, t in dag.task_dict.items() if t_id not in before and t_id not in partners]
    ids = {t.task_id for t in new}
    for work in new:
        if not work.upstream_task_ids & ids:
            for s in setups:
                s.set_downstream(work)
        if not work.downstream_task_ids & ids:
            for t in teardowns:
                work.set_downstream(t)
