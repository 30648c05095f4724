"""Executors: where task code runs. The scheduler only sees the ``BaseExecutor`` interface."""

from tailrace.executors.base import BaseExecutor, ExecutorEvent
from tailrace.executors.local import LocalExecutor

__all__ = ["BaseExecutor", "ExecutorEvent", "LocalExecutor"]
