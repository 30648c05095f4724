"""``defer()``: deferring a TaskFlow (``@task``) function."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, NoReturn

from tailrace.sdk._baseoperator import BaseOperator
from tailrace.sdk._context import get_current_context
from tailrace.sdk.triggers._base import RESUME_TASKFLOW, BaseTrigger


def _accepts(function: Any, names: list[str]) -> list[str]:
    """The ``names`` ``function`` cannot take as keyword arguments."""
    params = inspect.signature(function).parameters.values()
    if any(p.kind == p.VAR_KEYWORD for p in params):
        return []
    keywords = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return [n for n in names if n not in keywords]


def defer(
    trigger: BaseTrigger,
    *,
    kwargs: Mapping[str, Any] | None = None,
    timeout: timedelta | float | None = None,
) -> NoReturn:
    """Suspend the running ``@task`` function until ``trigger`` fires.

    The worker slot is freed while the trigger waits. When it fires, the function is
    called **again** with its original arguments plus ``event=<the event's payload>``
    and the entries of ``kwargs``, so a function that defers must take an ``event``
    parameter (``None`` on the first call) and start by checking it::

        @task
        def wait_for_report(report_id: str, event=None):
            if event is None:
                defer(FileTrigger(f"/reports/{report_id}.csv", poll_interval=30))
            return event["path"]

    What the resumed call returns is the task's XCom; it may defer again. ``timeout`` (a
    timedelta or seconds) fails the task if the trigger has not fired by then. Raises
    :class:`~tailrace.sdk.TaskDeferred`, which ``except Exception`` does not catch;
    ``TypeError`` if the function lacks ``event`` (or a parameter named in ``kwargs``).
    Operators call :meth:`BaseOperator.defer` instead.
    """
    context = get_current_context()
    operator = context.get("task")
    function = getattr(operator, "python_callable", None)
    if not isinstance(operator, BaseOperator) or function is None:
        raise TypeError(
            "defer() only works inside a @task function; an operator calls "
            "self.defer(trigger=..., method_name=...) instead"
        )
    resume_kwargs = dict(kwargs or {})
    missing = _accepts(function, ["event", *resume_kwargs])
    if missing:
        name = getattr(function, "__qualname__", repr(function))
        raise TypeError(
            f"Task function '{name}' (task '{operator.task_id}') called defer(), but it has "
            f"no parameter(s) {missing} to receive them when it resumes: the function is "
            "called again with event=<the trigger's payload> and defer()'s kwargs. Add e.g. "
            "'event=None' to its signature."
        )
    operator.defer(
        trigger=trigger, method_name=RESUME_TASKFLOW, kwargs=resume_kwargs, timeout=timeout
    )
