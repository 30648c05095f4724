"""The scheduler: creates runs, moves task instances through their states, dispatches work."""

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tailrace.scheduler._scheduler import Scheduler

__all__ = ["Scheduler", "utcnow"]


def utcnow() -> datetime:
    """Now, in UTC: what the scheduler, the CLI and the API stamp rows with."""
    return datetime.now(UTC)


def __getattr__(name: str) -> Any:
    # The scheduler proper (executors, workers …) loads when first used: creating a run
    # from the CLI needs only ``utcnow``.
    if name == "Scheduler":
        from tailrace.scheduler._scheduler import Scheduler

        return Scheduler
    raise AttributeError(f"module 'tailrace.scheduler' has no attribute {name!r}")
