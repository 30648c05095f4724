"""The contract with the runtime that executes tasks (the worker).

Not part of the authoring API: DAG authors never need it. The worker builds a context
with :func:`build_context`, runs a task with :func:`execute_task` and its end-of-try
callbacks with :func:`run_callbacks`; XCom access and skips go through its
:class:`RuntimeTaskInstance` implementation.
"""

from tailrace.sdk._callbacks import CALLBACK_OF_STATE, run_callbacks
from tailrace.sdk._context import (
    Context,
    build_context,
    build_dag_run_context,
    set_current_context,
)
from tailrace.sdk._deadline_runtime import DeadlineCallbackTrigger, call_deadline_callback
from tailrace.sdk._execute import (
    execute_task,
    render_map_index,
    rendered_template_fields,
    resolve_task,
)
from tailrace.sdk._runtime import DagRunInfo, RuntimeTaskInstance

__all__ = [
    # running a task
    "CALLBACK_OF_STATE",
    # protocol
    "Context",
    "DagRunInfo",
    "DeadlineCallbackTrigger",
    "RuntimeTaskInstance",
    "build_context",
    "build_dag_run_context",
    "call_deadline_callback",
    "execute_task",
    "render_map_index",
    "rendered_template_fields",
    "resolve_task",
    "run_callbacks",
    "set_current_context",
]
