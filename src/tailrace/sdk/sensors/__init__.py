"""Sensors: tasks that wait for a condition — a moment, a file, or your own ``poke``.

Subclass :class:`BaseSensorOperator` and implement ``poke``. Every built-in sensor can
wait in the triggerer (its ``...Async`` variant, or ``deferrable=True``), which costs no
worker slot while it waits.
"""

from tailrace.sdk.sensors._base import BaseSensorOperator, PokeReturnValue
from tailrace.sdk.sensors._filesystem import FileSensor, FileSensorAsync
from tailrace.sdk.sensors._time import (
    DateTimeSensor,
    DateTimeSensorAsync,
    TimeDeltaSensor,
    TimeDeltaSensorAsync,
)

__all__ = [  # noqa: RUF022 - grouped by concept
    "BaseSensorOperator",
    "PokeReturnValue",
    # built-in sensors
    "DateTimeSensor",
    "DateTimeSensorAsync",
    "FileSensor",
    "FileSensorAsync",
    "TimeDeltaSensor",
    "TimeDeltaSensorAsync",
]
