"""Trigger rules as a pure function of the upstream task instances' states."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

from tailrace.state import TaskInstanceState as TIS


class Decision(Enum):
    WAIT = "wait"
    READY = "ready"
    SKIP = "skip"
    UPSTREAM_FAILED = "upstream_failed"


@dataclass(frozen=True)
class UpstreamCounts:
    total: int = 0
    success: int = 0
    skipped: int = 0
    failed: int = 0  # failed or upstream_failed
    removed: int = 0

    @property
    def done(self) -> int:
        return self.success + self.skipped + self.failed + self.removed

    def plus(self, counts: Mapping[str, int], unfinished: int = 0) -> UpstreamCounts:
        """These counts and ``counts`` (instances by state) plus ``unfinished`` others."""
        failed = counts.get(TIS.FAILED, 0) + counts.get(TIS.UPSTREAM_FAILED, 0)
        total = sum(counts.values()) + unfinished
        return UpstreamCounts(
            self.total + total,
            self.success + counts.get(TIS.SUCCESS, 0),
            self.skipped + counts.get(TIS.SKIPPED, 0),
            self.failed + failed,
            self.removed + counts.get(TIS.REMOVED, 0),
        )

    @classmethod
    def of(cls, states: Iterable[str | None]) -> UpstreamCounts:
        total = success = skipped = failed = removed = 0
        for state in states:
            total += 1
            if state == TIS.SUCCESS:
                success += 1
            elif state == TIS.SKIPPED:
                skipped += 1
            elif state in (TIS.FAILED, TIS.UPSTREAM_FAILED):
                failed += 1
            elif state == TIS.REMOVED:
                removed += 1
        return cls(total, success, skipped, failed, removed)


def evaluate(rule: str, up: UpstreamCounts) -> Decision:  # noqa: C901 - one branch per rule
    """What to do with a task whose upstream instances are summarised by ``up``."""
    if up.total == 0 or rule == "always":
        return Decision.READY
    all_done = up.done == up.total
    match rule:
        case "all_success":
            if up.failed:
                return Decision.UPSTREAM_FAILED
            if up.skipped:
                return Decision.SKIP
            return Decision.READY if all_done else Decision.WAIT
        case "all_failed":
            if up.success or up.skipped:
                return Decision.SKIP
            return Decision.READY if all_done else Decision.WAIT
        case "all_done" | "all_done_setup_success":
            return Decision.READY if all_done else Decision.WAIT
        case "all_done_min_one_success":
            if not all_done:
                return Decision.WAIT
            return Decision.READY if up.success else Decision.SKIP
        case "all_skipped":
            if up.success or up.failed:
                return Decision.SKIP
            return Decision.READY if all_done else Decision.WAIT
        case "one_success":
            if up.success:
                return Decision.READY
            if not all_done:
                return Decision.WAIT
            return Decision.UPSTREAM_FAILED if up.failed else Decision.SKIP
        case "one_failed":
            if up.failed:
                return Decision.READY
            return Decision.SKIP if all_done else Decision.WAIT
        case "one_done":
            if up.success or up.failed:
                return Decision.READY
            return Decision.SKIP if all_done else Decision.WAIT
        case "none_failed":
            if up.failed:
                return Decision.UPSTREAM_FAILED
            return Decision.READY if all_done else Decision.WAIT
        case "none_failed_min_one_success":
            if up.failed:
                return Decision.UPSTREAM_FAILED
            if not all_done:
                return Decision.WAIT
            return Decision.READY if up.success else Decision.SKIP
        case "none_skipped":
            if up.skipped:
                return Decision.SKIP
            return Decision.READY if all_done else Decision.WAIT
    raise ValueError(f"unknown trigger rule {rule!r}")
