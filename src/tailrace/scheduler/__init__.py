"""The scheduler: creates runs, moves task instances through their states, dispatches work.

`reports` applies what workers report (the local executor's and the execution API's
path alike); `worker_requests` answers what a running task asks for.
"""

from tailrace.clock import utcnow
from tailrace.scheduler._loop import Scheduler

__all__ = ["Scheduler", "utcnow"]
