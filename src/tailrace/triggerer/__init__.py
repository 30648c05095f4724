"""The triggerer: runs the async triggers that deferred tasks wait on."""

from tailrace.triggerer._triggerer import Triggerer, TriggererStats

__all__ = ["Triggerer", "TriggererStats"]
