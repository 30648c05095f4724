"""Trigger log lines go into the deferred task's log file for that try.

Each trigger runs in its own asyncio task with a context variable naming its task's log
file; one handler on the root logger routes records made in that context there. So a
trigger's lines are readable while the task is still deferred.
"""

from __future__ import annotations

import contextvars
import logging
from pathlib import Path
from typing import TextIO

from tailrace import tracing
from tailrace.execution import LOG_FORMAT, TRACED_LOG_FORMAT, TraceIds

current_log_path: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "tailrace_trigger_log_path", default=None
)


class TriggerLogRouter(logging.Handler):
    """Appends records made inside a trigger's context to that trigger's task log."""

    def __init__(self) -> None:
        super().__init__()
        # With tracing on, a line ends with its trace and trigger-run span, as a worker's do.
        traced = tracing.enabled()
        form = TRACED_LOG_FORMAT if traced else LOG_FORMAT
        self.setFormatter(
            logging.Formatter(form.replace("{%(filename)s", "{triggerer %(filename)s"))
        )
        if traced:
            self.addFilter(TraceIds())
        self._files: dict[str, TextIO] = {}
        # Log files that could not be written: said once, then their lines are dropped.
        self._unwritable: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        path = current_log_path.get()
        if path is None:
            return
        try:
            self.write(path, self.format(record))
        except Exception:
            self.handleError(record)

    def write(self, path: str, line: str) -> None:
        """Append a line; a file that cannot be written (a full disk, a removed folder)
        costs its lines, never the trigger or the thread writing them."""
        with self.lock:  # type: ignore[union-attr]
            if path in self._unwritable:
                return
            try:
                self._write(path, line)
            except OSError as exc:
                self._unwritable.add(path)
                logging.getLogger(__name__).warning(
                    "cannot write the task log %s (%s): its trigger lines are dropped", path, exc
                )

    def _write(self, path: str, line: str) -> None:
        handle = self._files.get(path)
        if handle is None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            handle = self._files[path] = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close_file()
        handle.write(line + "\n")
        handle.flush()

    def close_file(self, path: str | None) -> None:
        """The trigger finished: close its file."""
        if path is None:
            return
        with self.lock:  # type: ignore[union-attr]
            handle = self._files.pop(path, None)
        if handle is not None:
            handle.close()

    def close(self) -> None:
        for handle in self._files.values():
            handle.close()
        self._files.clear()
        super().close()
