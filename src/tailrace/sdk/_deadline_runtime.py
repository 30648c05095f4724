"""Calling a missed deadline's callback: a worker calls a SyncCallback
(:func:`call_deadline_callback`), the triggerer awaits an AsyncCallback through
:class:`DeadlineCallbackTrigger`. Both import the callable by its path, render the
string kwargs as Jinja templates with the deadline's context, and pass that context to a
callable that takes it (as Airflow does)."""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

from tailrace.sdk._deadline import import_path
from tailrace.sdk._templating import create_environment
from tailrace.sdk.triggers import BaseTrigger, TaskSuccessEvent

log = logging.getLogger(__name__)


def render_kwargs(kwargs: Mapping[str, Any], context: Mapping[str, Any]) -> dict[str, Any]:
    """``kwargs`` with each string holding a template rendered with ``context``; one that
    does not render is passed as written, with a warning (the alert still goes out)."""
    env = create_environment()

    def render(value: Any) -> Any:
        if isinstance(value, str) and ("{{" in value or "{%" in value):
            try:
                return env.from_string(value).render(dict(context))
            except Exception as exc:
                log.warning("A deadline callback's template %r did not render: %s", value, exc)
                return value
        if isinstance(value, list):
            return [render(v) for v in value]
        if isinstance(value, dict):
            return {k: render(v) for k, v in value.items()}
        return value

    return {k: render(v) for k, v in kwargs.items()}


def _takes_context(target: Any) -> bool:
    try:
        parameters = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return False
    return "context" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


def _call(path: str, kwargs: Mapping[str, Any], context: Mapping[str, Any]) -> Any:
    target = import_path(path)
    arguments = render_kwargs(kwargs, context)
    if _takes_context(target):
        arguments["context"] = dict(context)
    return target(**arguments)


def call_deadline_callback(path: str, kwargs: Mapping[str, Any], context: Mapping[str, Any]) -> Any:
    """Call a SyncCallback's callable (in a worker); what it raises propagates."""
    return _call(path, kwargs, context)


class DeadlineCallbackTrigger(BaseTrigger):
    """Awaits an AsyncCallback's callable once, in the triggerer: its one event says it
    returned; if it raises, the trigger fails (and the deadline's callback with it)."""

    def __init__(
        self, callback_path: str, callback_kwargs: dict[str, Any], context: dict[str, Any]
    ) -> None:
        super().__init__()
        self.callback_path = callback_path
        self.callback_kwargs = callback_kwargs
        self.context = context

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{__name__}.DeadlineCallbackTrigger",
            {
                "callback_path": self.callback_path,
                "callback_kwargs": self.callback_kwargs,
                "context": self.context,
            },
        )

    async def run(self) -> AsyncIterator[Any]:
        deadline = self.context.get("deadline", {})
        log.info(
            "Deadline %s of run %s missed: awaiting %s",
            deadline.get("name") or deadline.get("id"),
            self.context.get("dag_run", {}).get("run_id"),
            self.callback_path,
        )
        await _call(self.callback_path, self.callback_kwargs, self.context)
        yield TaskSuccessEvent()
