"""Deferral to a remote job: submit it, wait in the triggerer, fetch the result."""

import asyncio
import time
from datetime import datetime, timedelta

from tailrace import BaseOperator, BaseTrigger, StartTriggerArgs, TriggerEvent, dag, defer, task
from tailrace.sdk.triggers import TimeDeltaTrigger

JOB_SECONDS = 0.5  # how long the simulated remote job runs


def submit_report() -> str:
    """Stands in for the call that starts a remote job; the id says when it started."""
    return f"report-{time.time():.3f}"


def fetch_report(job_id: str) -> dict:
    return {"job_id": job_id, "rows": 42}


class JobClient:
    """Stands in for an async client of the job service."""

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return None

    async def status(self, job_id: str) -> str:
        started = float(job_id.rsplit("-", 1)[1])
        return "done" if time.time() >= started + JOB_SECONDS else "running"


class JobDoneTrigger(BaseTrigger):
    def __init__(self, job_id: str, poll_interval: float = 30.0):
        super().__init__()
        self.job_id = job_id
        self.poll_interval = poll_interval

    def serialize(self):
        return (f"{type(self).__module__}.JobDoneTrigger",
                {"job_id": self.job_id, "poll_interval": self.poll_interval})

    async def run(self):
        async with JobClient() as client:              # an async client, made here
            while (status := await client.status(self.job_id)) == "running":
                self.log.info("job %s still running", self.job_id)
                await asyncio.sleep(self.poll_interval)
        yield TriggerEvent({"job_id": self.job_id, "status": status})

    async def cleanup(self):
        pass                                           # release anything run() held


class WaitForReport(BaseOperator):
    def execute(self, context):
        job_id = submit_report()                       # quick work on the worker
        self.defer(
            trigger=JobDoneTrigger(job_id, poll_interval=0.2),  # the waiting, in the triggerer
            method_name="execute_complete",            # what runs when it fires
            kwargs={"job_id": job_id},                 # passed to that method
            timeout=timedelta(hours=2),                # fail if it has not fired by then
        )

    def execute_complete(self, context, event=None, job_id=None):
        return fetch_report(job_id)                    # the event's payload is `event`


@task
def poll_job(job_id, event=None, attempt=0):
    if event is None:
        defer(TimeDeltaTrigger(timedelta(seconds=1)), kwargs={"attempt": attempt + 1})
    return f"job {job_id} checked after {attempt} waits"


class Doorbell(BaseTrigger):
    """Rings once, soon."""

    def __init__(self, door: str):
        super().__init__()
        self.door = door

    def serialize(self):
        return (f"{type(self).__module__}.Doorbell", {"door": self.door})

    async def run(self):
        await asyncio.sleep(0.2)
        yield TriggerEvent({"door": self.door, "rang": True})


class WaitForDoorbell(BaseOperator):
    start_from_trigger = True
    start_trigger_args = StartTriggerArgs(
        trigger_cls=f"{__name__}.Doorbell",
        trigger_kwargs={"door": "front"},
        next_method=None,            # None: the trigger's event ends the task
        timeout=timedelta(hours=1),
    )

    def execute(self, context):
        raise RuntimeError("never runs: the task starts in the triggerer")


@dag(schedule=None, start_date=datetime(2026, 1, 1), tags=["docs"])
def remote_job():
    WaitForReport(task_id="report")
    poll_job("job-7")
    WaitForDoorbell(task_id="doorbell")


remote_job()
