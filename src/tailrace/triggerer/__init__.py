"""The triggerer: runs the async triggers that deferred tasks wait on."""

from tailrace.triggerer._runner import TriggererStats
from tailrace.triggerer._triggerer import Triggerer

__all__ = ["Triggerer", "TriggererStats"]
