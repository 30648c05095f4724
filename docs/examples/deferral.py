"""Deferral: waits that hold no worker slot.

An operator and a @task defer to a trigger defined in this file, a sensor in reschedule
mode frees its slot between pokes, and a deferrable sensor ends in the triggerer.
"""

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta

from tailrace import BaseOperator, BaseTrigger, TriggerEvent, dag, defer, task
from tailrace.sdk.sensors import BaseSensorOperator, TimeDeltaSensorAsync
from tailrace.sdk.triggers import TimeDeltaTrigger


class CountdownTrigger(BaseTrigger):
    """Defined in the DAG file: the triggerer imports this file to run it."""

    def __init__(self, seconds: float, label: str) -> None:
        super().__init__()
        self.seconds = seconds
        self.label = label

    def serialize(self) -> tuple[str, dict[str, object]]:
        # type(self).__module__ is the name the DAG file is imported under.
        return f"{type(self).__module__}.CountdownTrigger", {
            "seconds": self.seconds,
            "label": self.label,
        }

    async def run(self):
        self.log.info("waiting %ss for %s", self.seconds, self.label)  # in the task's log
        await asyncio.sleep(self.seconds)  # never time.sleep: the loop is shared
        yield TriggerEvent({"label": self.label, "waited": self.seconds})


class WaitOperator(BaseOperator):
    def __init__(self, *, seconds: float, **kwargs):
        super().__init__(**kwargs)
        self.seconds = seconds

    def execute(self, context):
        self.defer(
            trigger=CountdownTrigger(self.seconds, self.task_id),
            method_name="execute_complete",
            kwargs={"deferred_at": time.time()},  # plain JSON, passed to execute_complete
            timeout=timedelta(minutes=1),  # fails the try if the trigger has not fired
        )

    def execute_complete(self, context, event=None, deferred_at=None):
        waited = time.time() - deferred_at
        self.log.info("resumed after %.1fs in try %d", waited, context["ti"].try_number)
        return event  # the task's return_value XCom


class ReadySensor(BaseSensorOperator):
    """Ready one second after the run started."""

    def poke(self, context) -> bool:
        started = context["dag_run"].start_date
        return datetime.now(UTC) >= started + timedelta(seconds=1)


@dag(schedule=None, start_date=datetime(2026, 1, 1), tags=["docs"])
def deferral():
    waited = WaitOperator(task_id="wait_operator", seconds=1)

    @task
    def poll(attempt: int = 0, event=None) -> str:
        # Called again on every resume, with event= and defer()'s kwargs.
        if attempt < 2:
            defer(TimeDeltaTrigger(timedelta(seconds=0.5)), kwargs={"attempt": attempt + 1})
        return f"done after {attempt} deferrals"

    # Reschedule mode: each wait between pokes is a deferral to a DateTimeTrigger.
    ready = ReadySensor(task_id="ready", mode="reschedule", poke_interval=0.5, timeout=30)

    # end_from_trigger: the trigger ends the task; no worker resumes it.
    pause = TimeDeltaSensorAsync(task_id="pause", delta=timedelta(seconds=1), end_from_trigger=True)

    @task
    def report(event: dict, polled: str) -> None:
        logging.getLogger(__name__).info("%s; %s", event, polled)

    ready >> pause
    report(waited.output, poll())


deferral()
