"""Worker-side runtime: what runs inside a worker process, and how it talks to its owner."""

from tailrace.execution._logs import capture_task_logs, log_path_for
from tailrace.execution._worker import worker_main
from tailrace.execution.protocol import (
    DagRunPayload,
    GetXCom,
    RunTask,
    TaskFinished,
    TaskStarted,
    XComReply,
    XComRow,
)

__all__ = [
    "DagRunPayload",
    "GetXCom",
    "RunTask",
    "TaskFinished",
    "TaskStarted",
    "XComReply",
    "XComRow",
    "capture_task_logs",
    "log_path_for",
    "worker_main",
]
