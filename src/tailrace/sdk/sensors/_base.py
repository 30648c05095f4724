"""BaseSensorOperator: a task that waits for a condition by checking it repeatedly."""

from __future__ import annotations

import logging
from abc import abstractmethod
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal

from tailrace.sdk import _clock as clock
from tailrace.sdk._baseoperator import BaseOperator
from tailrace.sdk._types import as_timedelta
from tailrace.sdk.errors import DagDefinitionError, SensorTimeout, SkipTask
from tailrace.sdk.triggers._temporal import DateTimeTrigger, utcnow

if TYPE_CHECKING:
    from tailrace.sdk._context import Context
    from tailrace.sdk.triggers._base import BaseTrigger

log = logging.getLogger("tailrace.task")

DEFAULT_TIMEOUT: Final = timedelta(days=7)


@dataclass(frozen=True)
class PokeReturnValue:
    """What :meth:`BaseSensorOperator.poke` may return instead of a bool: whether the
    condition is met, and the value the sensor then returns (its ``return_value`` XCom)."""

    is_done: bool
    xcom_value: Any = None

    def __bool__(self) -> bool:
        return self.is_done


def sleep(seconds: float) -> None:
    """Block between pokes in ``mode="poke"``: ``tailrace.clock``'s sleep (a virtual clock
    moves on instead)."""
    clock.sleep(seconds)


class BaseSensorOperator(BaseOperator):
    """Base class of sensors: subclasses implement :meth:`poke`, which checks the condition.

    The sensor pokes every ``poke_interval`` (seconds or a timedelta) until ``poke``
    returns True (or a done :class:`PokeReturnValue`, whose ``xcom_value`` becomes the
    task's result). Once ``timeout`` has passed since the first poke it fails with
    :class:`~tailrace.sdk.SensorTimeout`, which does not retry — or, with
    ``soft_fail=True``, ends *skipped*.

    ``mode="poke"`` waits in the worker, holding its slot: right for short waits.
    ``mode="reschedule"`` frees the slot between pokes: the sensor defers to a
    :class:`~tailrace.sdk.DateTimeTrigger` for the next poke and resumes in
    :meth:`execute`, which receives the first poke's time as ``sensor_started`` (so the
    timeout still counts from the first poke) and the pokes so far as ``poke_count``.

    ``exponential_backoff=True`` doubles the interval after every poke, up to
    ``max_wait``. ``deferrable=True`` is for sensors with an async trigger: their
    ``execute`` defers to it instead of poking (the built-in sensors support it).
    """

    ui_color = "#e6f1f2"
    valid_modes: ClassVar[tuple[str, ...]] = ("poke", "reschedule")

    def __init__(
        self,
        *,
        poke_interval: timedelta | float = 60,
        timeout: timedelta | float = DEFAULT_TIMEOUT,
        mode: Literal["poke", "reschedule"] = "poke",
        soft_fail: bool = False,
        exponential_backoff: bool = False,
        max_wait: timedelta | float | None = None,
        deferrable: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.poke_interval = self._seconds("poke_interval", poke_interval)
        self.timeout = self._seconds("timeout", timeout)
        if mode not in self.valid_modes:
            self._invalid("mode", f"mode must be one of {list(self.valid_modes)}, got {mode!r}")
        self.mode = mode
        self.soft_fail = soft_fail
        self.exponential_backoff = exponential_backoff
        self.max_wait = (
            None if max_wait is None else timedelta(seconds=self._seconds("max_wait", max_wait))
        )
        self.deferrable = deferrable

    def _invalid(self, field: str, message: str) -> None:
        raise DagDefinitionError(
            f"{type(self).__name__} '{self.task_id}': {message}",
            dag_id=self.dag.dag_id if self.dag is not None else None,
            task_id=self.task_id,
            field=field,
        )

    def _seconds(self, field: str, value: timedelta | float) -> float:
        try:
            span = as_timedelta(value)
        except TypeError as exc:
            self._invalid(field, str(exc))
            raise  # unreachable: _invalid raises
        seconds = span.total_seconds() if span is not None else -1.0
        if seconds < 0:
            self._invalid(field, f"{field} must be a non-negative number of seconds or timedelta")
        return seconds

    @abstractmethod
    def poke(self, context: Context) -> bool | PokeReturnValue:
        """Check the condition once: True (or a done ``PokeReturnValue``) ends the wait."""

    def execute(
        self,
        context: Context,
        event: Any = None,
        sensor_started: str | None = None,
        poke_count: int = 0,
    ) -> Any:
        """Poke until done (see the class docs). ``event``, ``sensor_started`` and
        ``poke_count`` are filled in when a ``mode="reschedule"`` sensor resumes."""
        trigger = self.deferral_trigger(context) if self.deferrable else None
        if trigger is not None:
            self.defer(
                trigger=trigger,
                method_name="execute_complete",
                timeout=self.deferral_timeout(),
                # As in poke mode: a sensor that times out is skipped (soft_fail) or
                # fails without retrying (SensorTimeout).
                timeout_outcome="skipped" if self.soft_fail else "failed_no_retry",
            )
        started = datetime.fromisoformat(sensor_started) if sensor_started else utcnow()
        while True:
            poke_count += 1
            result = self.poke(context)
            if isinstance(result, PokeReturnValue):
                if result.is_done:
                    return result.xcom_value
            elif result:
                return None
            elapsed = (utcnow() - started).total_seconds()
            if elapsed >= self.timeout:
                self._time_out(elapsed)
            wait = min(self.next_poke_interval(poke_count), self.timeout - elapsed)
            log.info("Condition not met after %d poke(s); poking again in %.3gs", poke_count, wait)
            if self.mode == "reschedule":
                self.defer(
                    trigger=DateTimeTrigger(utcnow() + timedelta(seconds=wait)),
                    method_name="execute",
                    kwargs={"sensor_started": started.isoformat(), "poke_count": poke_count},
                )
            sleep(wait)

    def deferral_trigger(self, context: Context) -> BaseTrigger | None:
        """The trigger a ``deferrable=True`` sensor waits on; ``None`` pokes instead.

        Sensors with an async path override this and ``execute_complete``.
        """
        return None

    def deferral_timeout(self) -> timedelta | None:
        """How long a deferred sensor may wait before its task fails (``None``: forever)."""
        return None

    def next_poke_interval(self, poke_count: int) -> float:
        """Seconds to wait after poke number ``poke_count`` (1-based)."""
        if not self.exponential_backoff:
            return self.poke_interval
        interval = self.poke_interval * 2.0 ** min(poke_count - 1, 64)
        if self.max_wait is not None:
            interval = min(interval, self.max_wait.total_seconds())
        return interval

    def _time_out(self, elapsed: float) -> None:
        message = (
            f"Sensor '{self.task_id}' timed out: its condition was not met within "
            f"{self.timeout:g}s (waited {elapsed:.3g}s)"
        )
        if self.soft_fail:
            raise SkipTask(f"{message}; skipping it (soft_fail=True)")
        raise SensorTimeout(message)
