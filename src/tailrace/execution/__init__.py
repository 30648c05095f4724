"""Worker-side runtime: what runs inside a worker process, and how it talks to its owner."""

from tailrace.execution._inprocess import run_task_in_process
from tailrace.execution._logs import (
    LOG_FORMAT,
    TRACED_LOG_FORMAT,
    TraceIds,
    capture_task_logs,
    dag_callback_log_path,
    log_path_for,
)
from tailrace.execution._worker import worker_main
from tailrace.execution.protocol import (
    CallbackTry,
    DagCallbackFinished,
    DagRunPayload,
    DeadlineCall,
    GetXCom,
    RunDagCallback,
    RunTask,
    TaskFinished,
    TaskStarted,
    Workload,
    XComReply,
    XComRow,
)

__all__ = [
    "LOG_FORMAT",
    "TRACED_LOG_FORMAT",
    "CallbackTry",
    "DagCallbackFinished",
    "DagRunPayload",
    "DeadlineCall",
    "GetXCom",
    "RunDagCallback",
    "RunTask",
    "TaskFinished",
    "TaskStarted",
    "TraceIds",
    "Workload",
    "XComReply",
    "XComRow",
    "capture_task_logs",
    "dag_callback_log_path",
    "log_path_for",
    "run_task_in_process",
    "worker_main",
]
