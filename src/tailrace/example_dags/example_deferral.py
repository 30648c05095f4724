"""Waiting that holds no worker: deferrable operators, TaskFlow deferral, start_from_trigger.

A "remote job" is simulated by time: it finishes a few seconds after submission. The
waiting happens in the triggerer; `tailrace triggers list` shows the triggers meanwhile,
and each task's log shows its trigger's lines.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

from tailrace import (
    BaseOperator,
    BaseTrigger,
    StartTriggerArgs,
    TaskSuccessEvent,
    TriggerEvent,
    dag,
    defer,
    task,
)
from tailrace.sdk.sensors import TimeDeltaSensorAsync


class JobDoneTrigger(BaseTrigger):
    """Polls a (simulated) remote job until it finishes. Async: it never blocks the loop."""

    def __init__(self, job_id: str, submitted_at: float, poll_interval: float = 0.5) -> None:
        super().__init__()
        self.job_id = job_id
        self.submitted_at = submitted_at
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, object]]:
        return (
            f"{type(self).__module__}.JobDoneTrigger",
            {
                "job_id": self.job_id,
                "submitted_at": self.submitted_at,
                "poll_interval": self.poll_interval,
            },
        )

    async def run(self):  # type: ignore[no-untyped-def]
        while time.time() - self.submitted_at < 2.0:  # the "remote job" takes two seconds
            self.log.info("job %s still running", self.job_id)
            await asyncio.sleep(self.poll_interval)
        yield TriggerEvent({"job_id": self.job_id, "status": "done"})


class RunRemoteJob(BaseOperator):
    """Submits a job, then frees its worker slot until the job is done."""

    def execute(self, context):  # type: ignore[no-untyped-def]
        job_id = f"job-{int(time.time())}"
        self.log.info("submitted %s", job_id)
        self.defer(
            trigger=JobDoneTrigger(job_id, submitted_at=time.time()),
            method_name="execute_complete",
            timeout=timedelta(minutes=5),
        )

    def execute_complete(self, context, event=None):  # type: ignore[no-untyped-def]
        self.log.info("job finished: %s", event)
        return event["job_id"]


class Doorbell(BaseTrigger):
    """Ends its task by itself: the task never touches a worker."""

    def serialize(self) -> tuple[str, dict[str, object]]:
        return (f"{type(self).__module__}.Doorbell", {})

    async def run(self):  # type: ignore[no-untyped-def]
        await asyncio.sleep(1)
        yield TaskSuccessEvent(xcoms={"return_value": f"rang at {datetime.now(UTC):%H:%M:%S}"})


class WaitForDoorbell(BaseOperator):
    start_from_trigger = True
    start_trigger_args = StartTriggerArgs(trigger_cls=f"{__name__}.Doorbell")

    def execute(self, context):  # type: ignore[no-untyped-def]
        raise RuntimeError("never runs: this task starts (and ends) in the triggerer")


@dag(schedule=None, start_date=datetime(2026, 1, 1), tags=["example", "deferral"])
def example_deferral():
    pause = TimeDeltaSensorAsync(task_id="short_pause", delta=timedelta(seconds=1))
    job = RunRemoteJob(task_id="remote_job")
    door = WaitForDoorbell(task_id="doorbell")

    @task
    def wait_in_taskflow(event=None):
        if event is None:
            defer(JobDoneTrigger("taskflow-job", submitted_at=time.time()))
        return f"TaskFlow resumed with {event}"

    @task
    def report(job_id, rang, resumed):
        print(job_id, rang, resumed)

    pause >> job
    report(job.output, door.output, wait_in_taskflow())


example_deferral()
