"""Sensors that wait for a moment: an absolute time, or a delta after the data interval."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from tailrace.sdk._types import as_timedelta
from tailrace.sdk.sensors._base import BaseSensorOperator
from tailrace.sdk.triggers._temporal import DateTimeTrigger, utcnow

if TYPE_CHECKING:
    from tailrace.sdk._context import Context


def _parse(value: datetime | str) -> datetime:
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


class _TimeSensor(BaseSensorOperator):
    """Shared by the time sensors: poke "now >= target", or defer to a DateTimeTrigger."""

    def __init__(self, *, end_from_trigger: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.end_from_trigger = end_from_trigger

    def target(self, context: Context) -> datetime:
        """The moment the sensor waits for (aware)."""
        raise NotImplementedError

    def poke(self, context: Context) -> bool:
        return utcnow() >= self.target(context)

    def deferral_trigger(self, context: Context) -> DateTimeTrigger:
        return DateTimeTrigger(self.target(context), self.end_from_trigger)

    def execute_complete(self, context: Context, event: Any = None) -> None:
        """Resumes the deferred sensor: the moment has come."""
        return None


class DateTimeSensor(_TimeSensor):
    """Waits until ``target_time`` (a datetime or ISO-8601 string; templated; naive = UTC).

    ``deferrable=True`` waits in the triggerer instead (as :class:`DateTimeSensorAsync`);
    then ``end_from_trigger=True`` ends the task there, without a worker.
    """

    template_fields: ClassVar[tuple[str, ...]] = ("target_time",)

    def __init__(self, *, target_time: datetime | str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not isinstance(target_time, datetime | str):
            self._invalid(
                "target_time",
                f"target_time must be a datetime or a string, got {type(target_time).__name__}",
            )
        self.target_time = (
            target_time.isoformat() if isinstance(target_time, datetime) else target_time
        )

    def target(self, context: Context) -> datetime:
        return _parse(self.target_time)


class DateTimeSensorAsync(DateTimeSensor):
    """:class:`DateTimeSensor` that always waits in the triggerer, freeing its worker slot."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs["deferrable"] = True
        super().__init__(**kwargs)


class TimeDeltaSensor(_TimeSensor):
    """Waits until ``delta`` after the run's data interval end (else its logical date,
    else its start; now as a last resort).

    ``deferrable=True`` waits in the triggerer instead (as :class:`TimeDeltaSensorAsync`).
    """

    def __init__(self, *, delta: timedelta | float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        span = as_timedelta(delta)
        if span is None:
            self._invalid("delta", "delta must be a timedelta or a number of seconds")
        self.delta: timedelta = span or timedelta()

    def target(self, context: Context) -> datetime:
        dag_run = context.get("dag_run")
        base = (
            context.get("data_interval_end")
            or context.get("logical_date")
            or (dag_run.start_date if dag_run is not None else None)
            or utcnow()
        )
        return _parse(base) + self.delta


class TimeDeltaSensorAsync(TimeDeltaSensor):
    """:class:`TimeDeltaSensor` that always waits in the triggerer, freeing its worker slot."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs["deferrable"] = True
        super().__init__(**kwargs)
