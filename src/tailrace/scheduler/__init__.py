"""The scheduler: creates runs, moves task instances through their states, dispatches work."""

from tailrace.scheduler._scheduler import Scheduler, utcnow

__all__ = ["Scheduler", "utcnow"]
