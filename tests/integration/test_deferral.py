"""Deferral end to end: worker -> trigger in the triggerer -> resume (or end) the task."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sqlalchemy import func, select

from tailrace.db.models import Trigger, TriggerEvent
from tailrace.testing import DagHarness, wait_for

WriteDag = Callable[[str, str], Path]

HEADER = """
import asyncio
import time
from datetime import UTC, datetime, timedelta
from tailrace import BaseOperator, BaseTrigger, StartTriggerArgs, TaskSuccessEvent, TriggerEvent
from tailrace import dag, defer, task
from tailrace.sdk.triggers import DateTimeTrigger

START = datetime(2026, 1, 1)


def soon(seconds=0.05):
    return datetime.now(UTC) + timedelta(seconds=seconds)
"""


def test_defer_and_resume_passes_kwargs_and_the_event_and_logs_the_trigger(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag(
        "waits.py",
        HEADER
        + """
class WaitThenReport(BaseOperator):
    def execute(self, context):
        self.log.info("deferring now")
        self.defer(
            trigger=DateTimeTrigger(soon()),
            method_name="execute_complete",
            kwargs={"note": "passed through"},
        )

    def execute_complete(self, context, event=None, note=None):
        self.log.info("resumed with %s", event)
        return {"note": note, "event_is_text": isinstance(event, str)}

@dag(schedule=None, start_date=START)
def waits():
    WaitThenReport(task_id="wait")

waits()
""",
    )
    harness.parse()
    pk = harness.trigger("waits")
    assert harness.run(pk)["state"] == "success"
    ti = harness.task_instance(pk, "wait")
    assert ti.try_number == 1  # resuming continues the try
    assert harness.xcom(pk, "wait") == {"note": "passed through", "event_is_text": True}
    log = harness.log(pk, "wait")
    order = [
        "deferring now",
        "Deferring to",
        "Trigger tailrace.sdk",
        "Trigger fired",
        "resumed with",
    ]
    positions = [log.index(marker) for marker in order]
    assert positions == sorted(positions), log
    with harness.engine.connect() as conn:
        trigger = conn.execute(select(Trigger)).one()
    # One event, consumed: its row is pruned (ADR 0023), the trigger keeps the count.
    assert (trigger.next_sequence, trigger.acked_sequence, trigger.completed) == (1, 0, True)
    assert len(trigger.trigger_run_id) == 32


def test_start_from_trigger_ends_the_task_with_no_worker_at_all(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag(
        "no_worker.py",
        HEADER
        + """
class Doorbell(BaseTrigger):
    def __init__(self, visitor):
        super().__init__()
        self.visitor = visitor

    def serialize(self):
        return (f"{__name__}.Doorbell", {"visitor": self.visitor})

    async def run(self):
        self.log.info("waiting for %s", self.visitor)
        await asyncio.sleep(0.01)
        yield TaskSuccessEvent(xcoms={"return_value": f"{self.visitor} arrived"})


class WaitAtTheDoor(BaseOperator):
    start_from_trigger = True
    start_trigger_args = StartTriggerArgs(
        trigger_cls=f"{__name__}.Doorbell", trigger_kwargs={"visitor": "ada"}
    )

    def execute(self, context):
        raise AssertionError("a start_from_trigger task must not run on a worker")

@dag(schedule=None, start_date=START)
def no_worker():
    door = WaitAtTheDoor(task_id="door")

    @task
    def greet(message):
        return message.upper()

    greet(door.output)

no_worker()
""",
    )
    harness.parse()
    pk = harness.trigger("no_worker")
    assert harness.run(pk)["state"] == "success"
    door = harness.task_instance(pk, "door")
    assert door.state == "success"
    assert door.id not in harness.dispatched
    assert door.hostname is None and door.pid is None
    assert harness.xcom(pk, "greet") == "ADA ARRIVED"
    assert "waiting for ada" in harness.log(pk, "door")


def test_a_deferral_timeout_fails_the_task_and_cancels_its_trigger(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag(
        "too_long.py",
        HEADER
        + """
class Patient(BaseOperator):
    def execute(self, context):
        self.defer(
            trigger=DateTimeTrigger(soon(3600)),
            method_name="execute_complete",
            timeout=timedelta(seconds=0.3),
        )

    def execute_complete(self, context, event=None):
        raise AssertionError("never resumed: the deferral times out first")

@dag(schedule=None, start_date=START)
def too_long():
    Patient(task_id="patient")

too_long()
""",
    )
    harness.parse()
    pk = harness.trigger("too_long")
    assert harness.run(pk)["state"] == "failed"
    ti = harness.task_instance(pk, "patient")
    assert ti.state == "failed"
    assert "deferral timed out" in (ti.error or "")
    with harness.engine.connect() as conn:
        assert conn.scalar(select(Trigger.completed)) is True
    assert harness.triggerer is not None
    wait_for(lambda: not harness.triggerer.running)


def test_a_raising_trigger_fails_its_task_with_the_traceback(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag(
        "broken_trigger.py",
        HEADER
        + """
class Broken(BaseTrigger):
    def serialize(self):
        return (f"{__name__}.Broken", {})

    async def run(self):
        await asyncio.sleep(0)
        raise ConnectionError("the remote job API is down")
        yield

@dag(schedule=None, start_date=START)
def broken_trigger():
    @task
    def waits(event=None):
        defer(Broken())

    waits()

broken_trigger()
""",
    )
    harness.parse()
    pk = harness.trigger("broken_trigger")
    assert harness.run(pk)["state"] == "failed"
    ti = harness.task_instance(pk, "waits")
    assert "ConnectionError: the remote job API is down" in (ti.error or "")
    assert "ConnectionError: the remote job API is down" in harness.log(pk, "waits")


def test_taskflow_functions_defer_and_are_called_again_with_the_event(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag(
        "taskflow_defer.py",
        HEADER
        + """
@dag(schedule=None, start_date=START)
def taskflow_defer():
    @task
    def poll_job(job_id, event=None, attempt=0):
        if event is None:
            defer(DateTimeTrigger(soon()), kwargs={"attempt": attempt + 1})
        return f"job {job_id} done after {attempt} deferral"

    poll_job(42)

taskflow_defer()
""",
    )
    harness.parse()
    pk = harness.trigger("taskflow_defer")
    assert harness.run(pk)["state"] == "success"
    assert harness.xcom(pk, "poll_job") == "job 42 done after 1 deferral"


def test_a_blocking_trigger_is_named_while_the_others_still_fire(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag(
        "blocking.py",
        HEADER
        + """
class Rude(BaseTrigger):
    def serialize(self):
        return (f"{__name__}.Rude", {})

    async def run(self):
        time.sleep(0.5)  # blocks the whole loop: exactly what triggers must not do
        yield TriggerEvent("done")

class Waits(BaseOperator):
    def __init__(self, rude=False, **kwargs):
        super().__init__(**kwargs)
        self.rude = rude

    def execute(self, context):
        trigger = Rude() if self.rude else DateTimeTrigger(soon(0.2))
        self.defer(trigger=trigger, method_name="execute_complete")

    def execute_complete(self, context, event=None):
        return event

@dag(schedule=None, start_date=START)
def blocking():
    Waits(task_id="rude", rude=True)
    for i in range(5):
        Waits(task_id=f"polite_{i}")

blocking()
""",
    )
    harness.parse()
    pk = harness.trigger("blocking")
    assert harness.run(pk)["state"] == "success"
    # The triggerer writes its lines into the task's log as they happen, apart from the
    # worker's: wait for the warning rather than read the file once.
    warned = wait_for(
        lambda: (
            (text := harness.log(pk, "rude"))
            and "has blocked the triggerer's event loop" in text
            and text
        ),
        timeout=30,
    )
    assert "blocking.rude" in warned
    for i in range(5):
        assert "blocked" not in harness.log(pk, f"polite_{i}")


def test_clearing_a_deferred_task_cancels_its_trigger(
    harness: DagHarness, write_dag: WriteDag
) -> None:

    from tailrace.dagrun import clear_task_instances, mark_task_instances

    write_dag(
        "forever.py",
        HEADER
        + """
class Forever(BaseOperator):
    def execute(self, context):
        self.defer(trigger=DateTimeTrigger(soon(3600)), method_name="execute_complete")

    def execute_complete(self, context, event=None):
        return event

@dag(schedule=None, start_date=START)
def forever():
    Forever(task_id="forever")

forever()
""",
    )
    harness.parse()
    with harness.running():
        pk = harness.trigger("forever")
        assert harness.triggerer is not None
        triggerer = harness.triggerer
        wait_for(
            lambda: harness.task_instance(pk, "forever").state == "deferred" and triggerer.running
        )
        first_trigger = harness.task_instance(pk, "forever").trigger_id
        # The trigger's lines are in the task's log while the task is still deferred.
        log_file = next(harness.log_folder.rglob("task_id=forever/attempt=1.log"))
        wait_for(lambda: "sleeping until" in log_file.read_text())
        assert harness.task_instance(pk, "forever").state == "deferred"
        with harness.engine.begin() as conn:
            clear_task_instances(conn, pk, ["forever"], harness.clock())
        harness.scheduler.wake()
        triggerer.wake()
        # The old trigger goes; the cleared task runs again and defers on a new one.
        wait_for(lambda: first_trigger not in triggerer.running)
        wait_for(
            lambda: harness.task_instance(pk, "forever").trigger_id not in (None, first_trigger)
        )
        wait_for(lambda: harness.task_instance(pk, "forever").state == "deferred")
        second_trigger = harness.task_instance(pk, "forever").trigger_id
        with harness.engine.begin() as conn:
            mark_task_instances(conn, pk, ["forever"], "success", harness.clock())
        triggerer.wake()
        harness.scheduler.wake()
        wait_for(lambda: second_trigger not in triggerer.running)
        wait_for(lambda: harness.is_finished(pk))
        with harness.engine.connect() as conn:
            assert conn.scalar(select(func.count()).select_from(TriggerEvent)) == 0
            assert (
                conn.scalar(
                    select(func.count()).select_from(Trigger).where(Trigger.completed.is_(False))
                )
                == 0
            )


def test_unserializable_trigger_arguments_are_refused_naming_dag_task_and_argument(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    from tailrace.db.models import ImportError_

    write_dag(
        "bad_start.py",
        HEADER
        + """
class StartsWithALambda(BaseOperator):
    start_from_trigger = True
    start_trigger_args = StartTriggerArgs(
        trigger_cls="tailrace.sdk.triggers.DateTimeTrigger",
        trigger_kwargs={"moment": "2026-01-01T00:00:00+00:00", "on_fire": lambda: None},
    )

    def execute(self, context):
        pass

@dag(schedule=None, start_date=START)
def bad_start():
    StartsWithALambda(task_id="lambda_arg")

bad_start()
""",
    )
    write_dag(
        "bad_defer.py",
        HEADER
        + """
import threading

class DefersWithALock(BaseOperator):
    def execute(self, context):
        self.defer(
            trigger=DateTimeTrigger(soon()),
            method_name="execute_complete",
            kwargs={"guard": threading.Lock()},
        )

    def execute_complete(self, context, event=None, guard=None):
        return event

@dag(schedule=None, start_date=START)
def bad_defer():
    DefersWithALock(task_id="lock_arg")

bad_defer()
""",
    )
    report = harness.parse()
    assert report.dags == 1  # bad_defer parses; bad_start does not
    with harness.engine.connect() as conn:
        (error,) = conn.execute(select(ImportError_)).all()
    assert Path(error.filename).name == "bad_start.py"
    for expected in ("bad_start", "lambda_arg", "on_fire", "function"):
        assert expected in error.message, error.message
    pk = harness.trigger("bad_defer")
    assert harness.run(pk)["state"] == "failed"
    ti = harness.task_instance(pk, "lock_arg")
    for expected in ("bad_defer", "lock_arg", "guard", "lock"):
        assert expected in (ti.error or "").lower(), ti.error


def test_datetimes_in_trigger_and_resume_kwargs_arrive_as_iso_strings(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag(
        "dated.py",
        HEADER
        + """
class Dated(BaseOperator):
    def execute(self, context):
        self.defer(
            trigger=DateTimeTrigger(soon()),
            method_name="execute_complete",
            kwargs={"since": datetime(2026, 5, 17, 12, 30, tzinfo=UTC)},
        )

    def execute_complete(self, context, event=None, since=None):
        return since

@dag(schedule=None, start_date=START)
def dated():
    Dated(task_id="dated")

dated()
""",
    )
    harness.parse()
    pk = harness.trigger("dated")
    assert harness.run(pk)["state"] == "success"
    assert harness.xcom(pk, "dated") == "2026-05-17T12:30:00Z"


def test_a_deferred_sensor_that_times_out_is_skipped_with_soft_fail_or_fails_for_good(
    harness: DagHarness, write_dag: WriteDag, tmp_path: Path
) -> None:
    write_dag(
        "sensing.py",
        HEADER
        + f"""
from tailrace.sdk.sensors import FileSensorAsync

@dag(schedule=None, start_date=START)
def sensing():
    FileSensorAsync(
        task_id="soft", filepath="{tmp_path}/never-*", timeout=0.3, poke_interval=0.05,
        soft_fail=True,
    )
    FileSensorAsync(
        task_id="hard", filepath="{tmp_path}/never-*", timeout=0.3, poke_interval=0.05,
        retries=2, retry_delay=0,
    )

sensing()
""",
    )
    harness.parse()
    pk = harness.trigger("sensing")
    harness.run(pk)
    assert harness.task_instance(pk, "soft").state == "skipped"
    hard = harness.task_instance(pk, "hard")
    assert hard.state == "failed"
    assert hard.try_number == 1  # a sensor timeout is not retried
