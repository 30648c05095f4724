"""Triggers: what a deferred task waits on in the triggerer, and the events they yield.

Write a trigger by subclassing :class:`BaseTrigger`; the built-ins cover waiting for a
moment (:class:`DateTimeTrigger`, :class:`TimeDeltaTrigger`) and for a file
(:class:`FileTrigger`). The runtime re-creates triggers with :func:`load_trigger`.
"""

from tailrace.sdk.triggers._base import (
    HANDLE_TRIGGER_EVENTS,
    RESUME_TASKFLOW,
    BaseEventTrigger,
    BaseTrigger,
    StartTriggerArgs,
    TaskFailedEvent,
    TaskSuccessEvent,
    TriggerEvent,
    check_trigger_kwargs,
    load_trigger,
    task_end_of,
)
from tailrace.sdk.triggers._file import FileTrigger
from tailrace.sdk.triggers._temporal import DateTimeTrigger, TimeDeltaTrigger

__all__ = [  # noqa: RUF022 - grouped by concept
    # writing triggers
    "BaseTrigger",
    "BaseEventTrigger",
    "TriggerEvent",
    "TaskSuccessEvent",
    "TaskFailedEvent",
    "StartTriggerArgs",
    # built-in triggers
    "DateTimeTrigger",
    "FileTrigger",
    "TimeDeltaTrigger",
    # for the runtime
    "HANDLE_TRIGGER_EVENTS",
    "RESUME_TASKFLOW",
    "check_trigger_kwargs",
    "load_trigger",
    "task_end_of",
]
