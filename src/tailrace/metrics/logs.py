"""Structured logs: ``log_format = "json"`` writes every component's lines to stderr as one
JSON object a line, with the task they concern and, when tracing is on, the trace.

- `TaskLogContext` names the try a line belongs to; `task_context` (a context variable)
  sets it where a try's code runs: the worker around each try, the triggerer around
  each trigger (each asyncio task has its own context). A line may also name its task
  itself with ``extra={"dag_id": …, "run_id": …}``.
- `ContextFilter` copies that context, and the current OpenTelemetry span's ids when
  ``opentelemetry`` is importable and a span is recording, onto each record as
  ``dag_id``, ``run_id``, ``task_id``, ``map_index``, ``try_number``, ``trace_id`` and
  ``span_id``. It is the one seam for trace ids in logs: add it to any handler (a task
  log file's, say) and that handler's records carry them too.
- `JsonFormatter` writes a record as JSON: ``ts``, ``level``, ``logger``, ``message``,
  ``component``, ``pid``, those fields when known, and ``exception`` with the traceback.

In JSON the stream carries INFO and worse, task and trigger lines included (a log
shipper wants them all); text, for people at a terminal, shows warnings and worse.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "CONTEXT_FIELDS",
    "LOG_FORMAT_VARIABLE",
    "ContextFilter",
    "JsonFormatter",
    "TaskLogContext",
    "configure",
    "configure_from_environment",
    "current_trace_ids",
    "set_task_context",
    "task_context",
]

# The setting's own variable: processes a component starts (its local workers) read it.
LOG_FORMAT_VARIABLE = "TAILRACE_LOG_FORMAT"
CONTEXT_FIELDS = ("dag_id", "run_id", "task_id", "map_index", "try_number", "trace_id", "span_id")
_HANDLER_NAME = "tailrace-json"


@dataclass(frozen=True, slots=True)
class TaskLogContext:
    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    try_number: int


_current: contextvars.ContextVar[TaskLogContext | None] = contextvars.ContextVar(
    "tailrace_task_log_context", default=None
)


def set_task_context(context: TaskLogContext | None) -> None:
    """Name the try this context's lines belong to (for a context of its own, such as
    an asyncio task's)."""
    _current.set(context)


@contextlib.contextmanager
def task_context(context: TaskLogContext) -> Iterator[None]:
    """Lines logged in the block belong to this try."""
    token = _current.set(context)
    try:
        yield
    finally:
        _current.reset(token)


def current_trace_ids() -> tuple[str, str] | None:
    """The current OpenTelemetry span's (trace id, span id) in hex, or None when
    opentelemetry is not installed or no span is active."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        # Never imported here: nothing can have started a span.
        return None
    span = trace.get_current_span().get_span_context()
    if not span.is_valid:
        return None
    return f"{span.trace_id:032x}", f"{span.span_id:016x}"


class ContextFilter(logging.Filter):
    """Adds the try and the trace a record belongs to (never overrides ``extra``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = _current.get()
        if context is not None:
            for name in ("dag_id", "run_id", "task_id", "map_index", "try_number"):
                if not hasattr(record, name):
                    setattr(record, name, getattr(context, name))
        if not hasattr(record, "trace_id"):
            ids = current_trace_ids()
            if ids is not None:
                record.trace_id, record.span_id = ids
        return True


class JsonFormatter(logging.Formatter):
    def __init__(self, component: str) -> None:
        super().__init__()
        self.component = component

    def format(self, record: logging.LogRecord) -> str:
        event: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="microseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "component": self.component,
            "pid": record.process,
        }
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value is not None and not (name == "map_index" and value == -1):
                event[name] = value
        if record.exc_info:
            event["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            event["exception"] = record.exc_text
        return json.dumps(event, ensure_ascii=False, default=str)


def configure(log_format: str, component: str, *, verbose: bool = False) -> None:
    """Make the root logger's stream ``log_format`` ("text" leaves it as the CLI set it
    up). Processes this one starts afterwards find the format in the environment."""
    os.environ[LOG_FORMAT_VARIABLE] = log_format
    if log_format != "json":
        return
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, logging.StreamHandler) or type(handler).__name__ == "RichHandler":
            root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setLevel(logging.DEBUG if verbose else logging.INFO)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter(component))
    root.addHandler(handler)
    if root.getEffectiveLevel() > handler.level:
        root.setLevel(handler.level)


def configure_from_environment(component: str) -> None:
    """In a process a component started (a local worker): its parent's format."""
    if os.environ.get(LOG_FORMAT_VARIABLE) == "json":
        configure("json", component)
