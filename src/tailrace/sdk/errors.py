"""Errors raised while defining DAGs, and the signals task code raises to steer its run.

Every error derives from :class:`TailraceError` and carries structured attributes (the
DAG, task and field it concerns) next to a message that says what was wrong, where, and
what to do about it.

The control-flow signals :class:`SkipTask` and :class:`FailTask` are raised *by user
code* inside a task; :class:`TaskExecutionTimeout` and :class:`TaskDeferred` derive from
``BaseException`` so an ``except Exception`` in user code cannot swallow them.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tailrace.sdk.triggers import BaseTrigger

__all__ = [
    "AirflowFailException",
    "AirflowSensorTimeout",
    "AirflowSkipException",
    "AirflowTaskTimeout",
    "CommandFailedError",
    "ConnectionNotFoundError",
    "DagCycleError",
    "DagDefinitionError",
    "DuplicateTaskIdError",
    "FailTask",
    "InvalidAssetError",
    "InvalidIdError",
    "InvalidScheduleError",
    "InvalidTriggerRuleError",
    "MultipleOutputsError",
    "ParamValidationError",
    "SensorTimeout",
    "SkipTask",
    "TailraceError",
    "TaskDeferred",
    "TaskExecutionTimeout",
    "TemplateRenderError",
    "TriggerArgumentError",
    "TriggerLoadError",
    "UnsupportedArgumentError",
    "UnsupportedNameError",
    "VariableNotFoundError",
]


class TailraceError(Exception):
    """Root of every error Tailrace raises.

    ``hint`` says what to do about the problem; it is appended to the message.
    """

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.reason = message
        self.hint = hint
        super().__init__(f"{message} {hint}" if hint else message)


def _where(message: str, dag_id: str | None, task_id: str | None, field: str | None) -> str:
    """`` [DAG 'x', task 'a', field 'f']`` for what ``message`` does not name already:
    each thing is said once."""
    parts = []
    if dag_id is not None and f"DAG '{dag_id}'" not in message:
        parts.append(f"DAG '{dag_id}'")
    if task_id is not None and f"'{task_id}'" not in message:
        parts.append(f"task '{task_id}'")
    if field is not None and field not in message:
        parts.append(f"field '{field}'")
    return f" [{', '.join(parts)}]" if parts else ""


class DagDefinitionError(TailraceError):
    """A DAG or task is defined wrongly; raised while the DAG file is parsed."""

    def __init__(
        self,
        message: str,
        *,
        dag_id: str | None = None,
        task_id: str | None = None,
        field: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.dag_id = dag_id
        self.task_id = task_id
        self.field = field
        super().__init__(f"{message}{_where(message, dag_id, task_id, field)}.", hint=hint)


class UnsupportedArgumentError(DagDefinitionError):
    """An Airflow argument whose value would change what runs, which Tailrace does not
    do yet: refused at parse time rather than silently ignored."""

    def __init__(
        self, *, dag_id: str | None, task_id: str | None, field: str, value: Any, hint: str
    ) -> None:
        where = f"DAG '{dag_id}'" if dag_id is not None else "A DAG"
        if task_id is not None:
            where += f", task '{task_id}'"
        super().__init__(
            f"{where}: {field}={value!r} is not supported by Tailrace",
            dag_id=dag_id,
            task_id=task_id,
            field=field,
            hint=hint,
        )


class UnsupportedNameError(TailraceError, ImportError):
    """A name of Airflow's authoring API that Tailrace does not have: raised where it is
    imported or used (an ``ImportError``, so ``from tailrace import X`` says why)."""

    def __init__(self, *, name: str, hint: str) -> None:
        self.name_refused = name
        super().__init__(f"{name} (from Airflow) is not supported by Tailrace.", hint=hint)


class DuplicateTaskIdError(DagDefinitionError):
    """Two tasks (or task groups) of one DAG share an id."""

    def __init__(self, *, dag_id: str, task_id: str, kind: str = "task") -> None:
        super().__init__(
            f"{kind.capitalize()} id '{task_id}' has already been added to DAG '{dag_id}'",
            dag_id=dag_id,
            task_id=task_id,
            field="group_id" if kind == "task group" else "task_id",
            hint=f"Give each {kind} of a DAG a unique id.",
        )


class DagCycleError(DagDefinitionError):
    """The dependencies of a DAG form a cycle; ``cycle`` is the path, first id repeated;
    ``location`` the (file, line) where its last dependency was set, when known."""

    def __init__(
        self, *, dag_id: str, cycle: Sequence[str], location: tuple[str, int] | None = None
    ) -> None:
        self.cycle = list(cycle)
        self.location = location
        super().__init__(
            f"DAG '{dag_id}' has a dependency cycle: {' -> '.join(self.cycle)}",
            dag_id=dag_id,
            hint="Remove one of these dependencies.",
        )
        # No one task is at fault: ``cycle`` names them all.


class InvalidScheduleError(DagDefinitionError):
    """The ``schedule`` of a DAG is not a valid cron expression, preset or timedelta."""

    def __init__(self, *, dag_id: str, schedule: object, reason: str) -> None:
        self.schedule = schedule
        super().__init__(
            f"DAG '{dag_id}' has an invalid schedule {schedule!r}: {reason}",
            dag_id=dag_id,
            field="schedule",
            hint=(
                "Use None, a cron expression such as '0 6 * * *', a preset such as "
                "'@daily', or a datetime.timedelta."
            ),
        )


class InvalidAssetError(DagDefinitionError):
    """An asset (or alias) whose name or URI cannot be stored or matched."""

    def __init__(self, *, what: str, value: object, reason: str) -> None:
        self.value = value
        super().__init__(
            f"Asset {what} {value!r} is invalid: {reason}",
            field=what,
            hint="See docs/concepts/assets.md for what an asset URI may be.",
        )


class ParamValidationError(DagDefinitionError):
    """A DAG param's value does not match its schema, or a required param is missing."""

    def __init__(self, *, dag_id: str | None, param: str, reason: str) -> None:
        self.param = param
        owner = f" of DAG '{dag_id}'" if dag_id else ""
        super().__init__(
            f"Param '{param}'{owner} is invalid: {reason}",
            dag_id=dag_id,
            field=f"params.{param}",
            hint="Pass a value matching the param's schema in the run's conf, or fix its default.",
        )


class InvalidTriggerRuleError(DagDefinitionError):
    """A task's ``trigger_rule`` is not one of :class:`~tailrace.sdk.TriggerRule`."""

    def __init__(
        self,
        *,
        task_id: str | None,
        trigger_rule: object,
        valid: Iterable[str],
        dag_id: str | None = None,
    ) -> None:
        self.trigger_rule = trigger_rule
        where = f" of task '{task_id}'" if task_id else ""
        super().__init__(
            f"Unknown trigger rule {trigger_rule!r}{where}",
            dag_id=dag_id,
            task_id=task_id,
            field="trigger_rule",
            hint=f"Use one of: {', '.join(valid)}.",
        )


class InvalidIdError(DagDefinitionError):
    """A DAG, task or task group id is empty, too long or has characters outside [A-Za-z0-9_.-]."""

    def __init__(self, *, kind: str, value: object, reason: str, dag_id: str | None = None) -> None:
        self.kind = kind
        self.value = value
        super().__init__(
            f"Invalid {kind} id {value!r}: {reason}",
            dag_id=dag_id,
            task_id=value if kind != "DAG" and isinstance(value, str) else None,
            field="dag_id" if kind == "DAG" else f"{kind.replace(' ', '_')}_id",
            hint="Ids may contain only letters, digits, '_', '.' and '-' (at most 250 characters).",
        )


class TriggerArgumentError(DagDefinitionError):
    """A trigger (or start-trigger) argument cannot be stored as JSON.

    Trigger arguments are persisted and handed to another process (the triggerer), so
    they must be plain data. ``field`` is the argument's name; ``path`` locates the
    offending value inside it (``kwargs['cfg']['client']``); ``value_type`` names its type.
    """

    def __init__(
        self,
        *,
        dag_id: str | None,
        task_id: str | None,
        field: str,
        path: str,
        value_type: str,
        what: str = "trigger",
    ) -> None:
        self.path = path
        self.value_type = value_type
        self.what = what
        super().__init__(
            f"{what[:1].upper()}{what[1:]} argument {path} is {value_type}, which cannot be "
            "stored as JSON",
            dag_id=dag_id,
            task_id=task_id,
            field=field,
            hint=(
                "Pass plain JSON values — str, numbers, bools, None, lists, dicts, "
                "datetimes — and build clients inside run()."
            ),
        )


class TriggerLoadError(TailraceError):
    """A trigger could not be re-created from its classpath and kwargs."""

    def __init__(self, *, classpath: str, reason: str, hint: str | None = None) -> None:
        self.classpath = classpath
        super().__init__(
            f"Cannot load trigger '{classpath}': {reason}",
            hint=hint
            or "Check that the trigger's module is importable where it runs (the triggerer) "
            "and that serialize() returns the arguments its __init__ takes.",
        )


class TemplateRenderError(TailraceError):
    """A templated field of a task could not be rendered with Jinja."""

    def __init__(self, *, task_id: str, field: str, reason: str, hint: str | None = None) -> None:
        self.task_id = task_id
        self.field = field
        super().__init__(
            f"Could not render template field '{field}' of task '{task_id}': {reason}",
            hint=hint or "Fix the Jinja template, or the file it names.",
        )


class MultipleOutputsError(TailraceError, TypeError):
    """A task with ``multiple_outputs=True`` returned something other than a dict of str keys."""

    def __init__(self, *, task_id: str, reason: str) -> None:
        self.task_id = task_id
        super().__init__(
            f"Task '{task_id}' has multiple_outputs=True but {reason}",
            hint="Return a dict with string keys, or set multiple_outputs=False.",
        )


class TryEndedWithoutWorker(TailraceError):
    """``context["exception"]`` of a task's failure or retry callback for a try that ended
    where no worker could call it — its deferral timed out, its trigger failed, its
    worker was lost; the message says which."""


# --- control-flow signals raised by task code --------------------------------------------


class SkipTask(Exception):
    """Raise inside a task to end it in the *skipped* state."""


class FailTask(Exception):
    """Raise inside a task to fail it at once, without using the remaining retries."""


class SensorTimeout(FailTask):
    """A sensor waited longer than its ``timeout``; the task fails without retrying.

    With ``soft_fail=True`` the sensor raises :class:`SkipTask` instead.
    """


class TaskExecutionTimeout(BaseException):
    """Raised in a task that ran longer than its ``execution_timeout``.

    Derives from ``BaseException`` so that ``except Exception`` in user code does not catch it.
    """


class TaskDeferred(BaseException):
    """Raised by :meth:`BaseOperator.defer` (or :func:`~tailrace.sdk.defer`) to suspend a task.

    The runtime hands ``trigger`` to the triggerer and frees the worker slot. When the
    trigger fires, the task resumes in a worker by calling ``method_name(context,
    event=<payload>, **kwargs)`` on a fresh copy of the operator. ``timeout`` bounds the
    wait (``None``: no limit); ``timeout_outcome`` is what a passed timeout does to the
    task: ``"failed"`` (under its retry rules), ``"failed_no_retry"`` or ``"skipped"``.

    Derives from ``BaseException`` so that ``except Exception`` in user code does not catch it.
    """

    def __init__(
        self,
        *,
        trigger: BaseTrigger,
        method_name: str,
        kwargs: dict[str, Any] | None = None,
        timeout: timedelta | None = None,
        timeout_outcome: str = "failed",
    ) -> None:
        self.trigger = trigger
        self.method_name = method_name
        self.kwargs: dict[str, Any] = dict(kwargs or {})
        self.timeout = timeout
        self.timeout_outcome = timeout_outcome
        super().__init__(trigger, method_name, self.kwargs, timeout)

    def __str__(self) -> str:
        return f"Task deferred to {self.trigger!r}; resumes in {self.method_name}()"

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only arguments: the default BaseException pickling would pass them
        # positionally. Workers may hand the signal across a process boundary.
        return (
            functools.partial(
                TaskDeferred,
                trigger=self.trigger,
                method_name=self.method_name,
                kwargs=self.kwargs,
                timeout=self.timeout,
                timeout_outcome=self.timeout_outcome,
            ),
            (),
        )


AirflowSkipException = SkipTask
AirflowFailException = FailTask
AirflowTaskTimeout = TaskExecutionTimeout
AirflowSensorTimeout = SensorTimeout


class CommandFailedError(TailraceError):
    """A command run by a task (e.g. ``BashOperator``) exited with a non-zero code."""

    def __init__(self, *, task_id: str, exit_code: int) -> None:
        self.task_id = task_id
        self.exit_code = exit_code
        super().__init__(
            f"Bash command of task '{task_id}' failed: it returned the non-zero exit code "
            f"{exit_code}",
            hint="See the task log for its output.",
        )


class ConnectionNotFoundError(TailraceError):
    """No connection with this id: neither an environment variable nor a stored one."""

    def __init__(self, conn_id: str, env_var: str) -> None:
        self.conn_id = conn_id
        self.env_var = env_var
        super().__init__(
            f"connection {conn_id!r} is not defined",
            hint=f"Set the environment variable {env_var} to its URI, or add it with "
            f"`tailrace connections add {conn_id} --uri ...`.",
        )


class VariableNotFoundError(TailraceError, KeyError):
    """No variable with this key: neither an environment variable nor a stored one.

    A ``KeyError`` too, as Airflow 2's ``Variable.get`` raised."""

    def __init__(self, key: str, env_var: str, *, reason: str | None = None) -> None:
        self.key = key
        self.env_var = env_var
        super().__init__(
            reason or f"variable {key!r} is not defined",
            hint=f"Set the environment variable {env_var}, or store it with "
            f"`tailrace variables set {key} VALUE`.",
        )

    def __str__(self) -> str:  # KeyError would quote the message
        return Exception.__str__(self)
