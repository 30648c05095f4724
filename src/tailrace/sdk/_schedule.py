"""Parsing a DAG's ``schedule`` argument into one of a few plain kinds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from tailrace.sdk._assets import BaseAsset, as_condition, describe_condition
from tailrace.sdk.errors import InvalidScheduleError

ScheduleArg = str | timedelta | BaseAsset | Sequence[BaseAsset] | None

PRESETS: dict[str, str] = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@quarterly": "0 0 1 */3 *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}


@dataclass(frozen=True)
class ParsedSchedule:
    """A schedule reduced to its kind: manual only, once, a cron expression, an interval,
    or a condition over assets."""

    kind: Literal["none", "once", "cron", "delta", "asset"]
    cron: str | None = None
    delta: timedelta | None = None
    condition: BaseAsset | None = None

    @property
    def description(self) -> str:
        if self.kind == "asset":
            assert self.condition is not None
            return describe_condition(self.condition)
        if self.kind == "cron":
            return self.cron or ""
        if self.kind == "delta":
            return f"every {self.delta}"
        return "@once" if self.kind == "once" else ""


def parse_schedule(schedule: object, *, dag_id: str) -> ParsedSchedule:
    """Parse ``schedule`` or raise :class:`InvalidScheduleError` naming the DAG and value."""
    if schedule is None:
        return ParsedSchedule("none")
    condition = as_condition(schedule, dag_id=dag_id)
    if condition is not None:
        return ParsedSchedule("asset", condition=condition)
    if isinstance(schedule, timedelta):
        if schedule <= timedelta(0):
            raise InvalidScheduleError(
                dag_id=dag_id, schedule=schedule, reason="the interval must be positive"
            )
        return ParsedSchedule("delta", delta=schedule)
    if not isinstance(schedule, str):
        raise InvalidScheduleError(
            dag_id=dag_id,
            schedule=schedule,
            reason=f"a schedule cannot be a {type(schedule).__name__}",
        )
    text = schedule.strip()
    if text == "@once":
        return ParsedSchedule("once")
    if text.startswith("@"):
        if text not in PRESETS:
            raise InvalidScheduleError(
                dag_id=dag_id,
                schedule=schedule,
                reason=f"unknown preset; known presets are @once, {', '.join(PRESETS)}",
            )
        return ParsedSchedule("cron", cron=PRESETS[text])
    from croniter import croniter  # lazily: slow to import

    if len(text.split()) not in (5, 6) or not croniter.is_valid(text):
        raise InvalidScheduleError(
            dag_id=dag_id, schedule=schedule, reason="it is not a valid cron expression"
        )
    return ParsedSchedule("cron", cron=text)
