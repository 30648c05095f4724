"""The contract with the runtime that executes tasks (the worker).

Not part of the authoring API: DAG authors never need it. The worker builds a context
with :func:`build_context` and runs a task with :func:`execute_task`; XCom access and
skips go through its :class:`RuntimeTaskInstance` implementation.
"""

from tailrace.sdk._context import build_context, set_current_context
from tailrace.sdk._execute import execute_task, render_map_index, resolve_task
from tailrace.sdk._runtime import DagRunInfo, RuntimeTaskInstance

__all__ = [
    # protocol
    "DagRunInfo",
    "RuntimeTaskInstance",
    # running a task
    "build_context",
    "execute_task",
    "render_map_index",
    "resolve_task",
    "set_current_context",
]
