"""The scheduler: creates runs, moves task instances through their states, dispatches work.

`reports` applies what workers report (the local executor's and the execution API's
path alike); `worker_requests` answers what a running task asks for.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tailrace.scheduler._loop import Scheduler

__all__ = ["Scheduler"]


def __getattr__(name: str) -> Any:
    # The loop (executors, workers …) loads when first used: the report path and the CLI
    # import this package without it.
    if name == "Scheduler":
        from tailrace.scheduler._loop import Scheduler

        return Scheduler
    raise AttributeError(f"module 'tailrace.scheduler' has no attribute {name!r}")
