"""Task callbacks (``on_execute_callback``, ``on_success_callback`` ...) and the arguments
Tailrace accepts from Airflow but cannot honour yet, which it refuses at parse time."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tailrace.sdk.errors import DagDefinitionError, UnsupportedArgumentError

if TYPE_CHECKING:
    from tailrace.sdk._context import Context

Callback = Callable[["Context"], Any]
# What a callback argument takes.
Callbacks = Callable[..., Any] | list[Callable[..., Any]] | None

TASK_CALLBACKS = (
    "on_execute_callback",
    "on_success_callback",
    "on_failure_callback",
    "on_retry_callback",
    "on_skipped_callback",
)
# The callback a try's final state calls (a deferred or still-handling try calls none).
CALLBACK_OF_STATE = {
    "success": "on_success_callback",
    "failed": "on_failure_callback",
    "up_for_retry": "on_retry_callback",
    "skipped": "on_skipped_callback",
}


def as_callbacks(
    value: Any, *, name: str, dag_id: str | None, task_id: str | None
) -> list[Callback]:
    """A callback argument as a list: ``None``, one callable, or a list of callables."""
    if value is None:
        return []
    callbacks = list(value) if isinstance(value, list | tuple) else [value]
    for callback in callbacks:
        if not callable(callback):
            raise DagDefinitionError(
                f"{name} must be a callable or a list of callables, got {callback!r}",
                dag_id=dag_id,
                task_id=task_id,
                field=name,
                hint="Pass a function taking the task's context.",
            )
    return callbacks


def run_callbacks(task: Any, name: str, context: Context, log: logging.Logger) -> int:
    """Call each of ``task``'s (or a DAG's) ``name`` callbacks with ``context``, as Airflow
    does: one that raises is logged (in the task's log) and the others still run; the
    task's outcome does not change. Returns how many raised."""
    failed = 0
    for index, callback in enumerate(getattr(task, name, None) or ()):
        try:
            callback(context)
        except (Exception, SystemExit):  # not a timeout: it must still stop the task
            failed += 1
            log.exception(
                "%s #%d (%s) raised; the task's outcome is unchanged",
                name,
                index + 1,
                getattr(callback, "__qualname__", repr(callback)),
            )
    return failed


# Arguments Tailrace takes but does not act on yet: (is the value the default?, what to
# do). A default value changes nothing and is accepted.
_IGNORED_TASK_ARGS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "sla": (
        lambda v: v is None,
        "SLAs were removed in Airflow 3; their replacement is a DeadlineAlert, which "
        "Tailrace does not have yet. Remove it (a task's execution_timeout, or the DAG's "
        "dagrun_timeout with an on_failure_callback, bounds the time instead).",
    ),
}

_IGNORED_DAG_ARGS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "deadline": (
        lambda v: v is None,
        "Deadline alerts (Airflow 3.1's DeadlineAlert) are not supported yet: remove it, "
        "and bound the run with dagrun_timeout plus an on_failure_callback (its context's "
        "reason is 'timed_out') where a missed deadline must alert.",
    ),
    "sla_miss_callback": (
        lambda v: v is None,
        "SLAs were removed in Airflow 3; their replacement is a DeadlineAlert, which "
        "Tailrace does not have yet. Remove it.",
    ),
}


WEIGHT_RULES = ("downstream", "upstream", "absolute")
_RULES = frozenset(WEIGHT_RULES)
# Airflow's priority weights are stored as 32-bit integers; so are ours.
_MAX_WEIGHT = 2**31 - 1


def check_priority(
    priority_weight: Any, weight_rule: Any, *, dag_id: str | None, task_id: str | None
) -> tuple[int, str]:
    """``priority_weight`` and ``weight_rule`` checked as Airflow takes them (a weight
    rule named by its value: "downstream", "upstream" or "absolute")."""
    # The common case without a call: parsing a 1,000-task file must not get slower.
    if (
        weight_rule in _RULES
        and priority_weight.__class__ is int
        and -_MAX_WEIGHT - 1 <= priority_weight <= _MAX_WEIGHT
    ):
        return priority_weight, weight_rule
    rule = str(getattr(weight_rule, "value", weight_rule))
    if rule not in WEIGHT_RULES:
        raise DagDefinitionError(
            f"weight_rule={weight_rule!r} is not one of {', '.join(WEIGHT_RULES)}",
            dag_id=dag_id,
            task_id=task_id,
            field="weight_rule",
            hint="Custom PriorityWeightStrategy classes are not supported: use one of "
            "the three rules.",
        )
    if isinstance(priority_weight, bool) or not isinstance(priority_weight, int):
        raise DagDefinitionError(
            f"priority_weight must be an integer, got {priority_weight!r}",
            dag_id=dag_id,
            task_id=task_id,
            field="priority_weight",
        )
    return max(-_MAX_WEIGHT - 1, min(_MAX_WEIGHT, priority_weight)), rule


def check_pool_slots(value: Any, *, dag_id: str | None, task_id: str | None) -> int:
    """``pool_slots``: a whole number of at least 1, as in Airflow."""
    if value.__class__ is not int or value < 1:
        raise DagDefinitionError(
            f"pool_slots must be a whole number of at least 1, got {value!r}",
            dag_id=dag_id,
            task_id=task_id,
            field="pool_slots",
        )
    return value


def _refuse(
    table: Mapping[str, tuple[Callable[[Any], bool], str]],
    values: Mapping[str, Any],
    *,
    dag_id: str | None,
    task_id: str | None,
) -> None:
    for field, (is_default, hint) in table.items():
        value = values.get(field)
        if field in values and not is_default(value):
            raise UnsupportedArgumentError(
                dag_id=dag_id, task_id=task_id, field=field, value=value, hint=hint
            )


def refuse_ignored_task_args(
    values: Mapping[str, Any], *, dag_id: str | None, task_id: str | None
) -> None:
    """Raise :class:`UnsupportedArgumentError` for the first task argument in ``values``
    that Tailrace would have to ignore."""
    _refuse(_IGNORED_TASK_ARGS, values, dag_id=dag_id, task_id=task_id)


def refuse_ignored_dag_args(values: Mapping[str, Any], *, dag_id: str) -> None:
    """The same for a DAG's arguments."""
    _refuse(_IGNORED_DAG_ARGS, values, dag_id=dag_id, task_id=None)
