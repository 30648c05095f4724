"""Running one task instance: unmap, render, execute, push XComs."""

from __future__ import annotations

import copy
import inspect
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from tailrace.sdk._baseoperator import BaseOperator
from tailrace.sdk._callbacks import run_callbacks
from tailrace.sdk._context import Context, set_current_context
from tailrace.sdk._mapped import MappedOperator
from tailrace.sdk._node import AbstractOperator
from tailrace.sdk._types import XCOM_RETURN_KEY
from tailrace.sdk.errors import MultipleOutputsError
from tailrace.sdk.triggers._base import HANDLE_TRIGGER_EVENTS, RESUME_TASKFLOW


def _push_xcoms(task: AbstractOperator, context: Context, result: Any) -> None:
    if not task.do_xcom_push or result is None:
        return
    ti = context["ti"]
    if task.multiple_outputs:
        if not isinstance(result, Mapping):
            raise MultipleOutputsError(
                task_id=task.task_id, reason=f"it returned a {type(result).__name__}, not a dict"
            )
        bad = [k for k in result if not isinstance(k, str)]
        if bad:
            raise MultipleOutputsError(
                task_id=task.task_id, reason=f"the returned dict has non-string keys {bad!r}"
            )
        for key, value in result.items():
            ti.xcom_push(key, value)
    ti.xcom_push(XCOM_RETURN_KEY, result)


def resolve_task(task: AbstractOperator, context: Context) -> BaseOperator:
    """The operator instance to run: a copy of ``task`` (rendering templates must not change
    the DAG's own objects, which a worker may reuse), or for a mapped task the operator
    for ``context["ti"].map_index``. It is also stored as ``context["task"]``."""
    if isinstance(task, MappedOperator):
        concrete = task.unmap(context)
        context["task"] = concrete
        return concrete
    if not isinstance(task, BaseOperator):
        raise TypeError(f"Cannot execute {task!r}: not an operator")
    concrete = copy.copy(task)
    context["task"] = concrete
    return concrete


def _handle_events(operator: BaseOperator, context: Context, events: list[Any]) -> list[Any]:
    """Call ``handle_trigger_events`` with an ordered batch; what it yields or returns is
    the list of items to append to the task's output stream."""
    handler = getattr(operator, HANDLE_TRIGGER_EVENTS, None)
    if not callable(handler):
        raise TypeError(
            f"Task '{operator.task_id}' cannot take a batch of trigger events: "
            f"{type(operator).__name__} has no {HANDLE_TRIGGER_EVENTS}(events, context)"
        )
    result = handler(events, context)
    if result is None:
        return []
    if isinstance(result, Iterable) and not isinstance(result, str | bytes | Mapping):
        return list(result)
    return [result]


def _resume(
    operator: BaseOperator, context: Context, next_method: str, next_kwargs: dict[str, Any]
) -> Any:
    if next_method == HANDLE_TRIGGER_EVENTS:
        return _handle_events(operator, context, list(next_kwargs.get("events", [])))
    if next_method == RESUME_TASKFLOW:
        op_kwargs = getattr(operator, "op_kwargs", None)
        if getattr(operator, "python_callable", None) is None or not isinstance(op_kwargs, dict):
            raise TypeError(
                f"Task '{operator.task_id}' cannot resume a TaskFlow function: "
                f"{type(operator).__name__} has no python_callable"
            )
        # The function is called again: its original arguments plus event= and defer()'s
        # kwargs, after rendering so that event payloads are never treated as templates.
        operator.op_kwargs = {**op_kwargs, **next_kwargs}  # type: ignore[attr-defined]
        return operator.execute(context)
    method = getattr(operator, next_method, None)
    if not callable(method):
        raise TypeError(
            f"Task '{operator.task_id}' cannot resume in {next_method!r}: "
            f"{type(operator).__name__} has no such method"
        )
    return method(context, **next_kwargs)


def execute_task(
    task: AbstractOperator,
    context: Context,
    *,
    next_method: str | None = None,
    next_kwargs: Mapping[str, Any] | None = None,
    log: logging.Logger | None = None,
) -> Any:
    """Run one task instance and return what the operator returned.

    Unmaps a mapped task for ``context["ti"].map_index`` (and works on a copy of an
    unmapped one), renders template fields (pulling XComArgs), makes
    :func:`get_current_context` work, calls ``pre_execute``, ``execute`` and
    ``post_execute``, then pushes XComs through ``context["ti"]``: the return value unless
    it is ``None`` or ``do_xcom_push`` is False, plus each key of a returned dict with
    ``multiple_outputs``.
    Branching operators report the tasks to skip through ``ti.skip_downstream_tasks``.
    Exceptions from the operator (``SkipTask``, ``FailTask``, ``TaskDeferred`` ...)
    propagate unchanged. ``execution_timeout`` is the runtime's to enforce.

    Resuming a deferred task: with ``next_method`` set, ``getattr(operator,
    next_method)(context, **next_kwargs)`` is called instead of the three hooks
    (``next_kwargs`` holds ``event``, the trigger's payload, and the deferral's kwargs).
    ``next_method=RESUME_TASKFLOW`` calls a ``@task`` function again with ``next_kwargs``
    added to its arguments. The result is pushed like ``execute``'s.

    The task's ``on_execute_callback`` runs just before ``execute`` (or the resume
    method), after rendering and ``pre_execute``, as in Airflow; one that raises is
    logged to ``log`` and the task goes on.
    """
    operator = resolve_task(task, context)
    context["task"] = operator
    with set_current_context(context):
        operator.render_template_fields(context)
        if next_method is None:
            operator.pre_execute(context)
            run_callbacks(operator, "on_execute_callback", context, log or operator.log)
            result = operator.execute(context)
            operator.post_execute(context, result)
        else:
            run_callbacks(operator, "on_execute_callback", context, log or operator.log)
            result = _resume(operator, context, next_method, dict(next_kwargs or {}))
        if inspect.isgenerator(result) and next_method != HANDLE_TRIGGER_EVENTS:
            # A task that yields streams its output: each item lands in its output stream
            # while it runs, so `.iterate()` downstream starts on the first one.
            stream = getattr(context["ti"], "stream_output", None)
            if stream is None:  # a runtime without streams: the items become the value
                result = list(result)
            else:
                stream(result)
                return None
    if next_method != HANDLE_TRIGGER_EVENTS:  # a batch's items go to the output stream
        _push_xcoms(operator, context, result)
    return result


def rendered_template_fields(task: Any) -> dict[str, Any] | None:
    """``task``'s templated fields as :func:`execute_task` rendered them (call with
    ``context["task"]`` after it); ``None`` when rendering did not happen or failed."""
    rendered = getattr(task, "_rendered_template_fields", None)
    return dict(rendered) if rendered is not None else None


def render_map_index(task: AbstractOperator, context: Context) -> str | None:
    """The rendered ``map_index_template`` of ``task`` (``None`` if it has none).

    Call after :func:`execute_task` with the same context, so templates can use values
    the task put into the context.
    """
    template = context.get("task", task).map_index_template
    if not template:
        return None
    current = context.get("task", task)
    env = (
        current.get_template_env()
        if isinstance(current, BaseOperator)
        else (task.dag.get_template_env() if task.dag else None)
    )
    if env is None:
        from tailrace.sdk._templating import create_environment

        env = create_environment()
    return str(env.from_string(template).render(dict(context)))
