"""The DAG source the kill tests share: a fan-out and a stream whose every execution is
written to a record file (``kind key try``, one write a line), and the helpers that read
the record and the streams back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, select

from tailrace.db.models import TaskInstance
from tailrace.streams import read_items

_SOURCE = """
import asyncio
import time
from datetime import datetime, timedelta
from tailrace import BaseOperator, BaseTrigger, StartTriggerArgs, TriggerEvent, dag, task

RECORD = {record!r}
DEFAULT_ARGS = {default_args}


def record(kind, key, try_number):
    with open(RECORD, "a") as f:
        f.write(f"{{kind}} {{key}} {{try_number}}\\n")


class Count(BaseTrigger):
    def __init__(self, n, pause):
        super().__init__()
        self.n = n
        self.pause = pause

    def serialize(self):
        return (f"{{type(self).__module__}}.Count", {{"n": self.n, "pause": self.pause}})

    async def run(self):
        start = self.checkpoint["next"] if self.checkpoint else 0
        for i in range(start, self.n):
            await asyncio.sleep(self.pause)
            yield TriggerEvent({{"i": i}}, checkpoint={{"next": i + 1}})


class Produce(BaseOperator):
    start_from_trigger = True
    start_trigger_args = StartTriggerArgs(
        trigger_cls=f"{{__name__}}.Count", trigger_kwargs={{"n": {events}, "pause": {pause}}}
    )

    def execute(self, context):
        raise RuntimeError("lives in the triggerer")


class Batches(BaseOperator):
    def execute(self, context):
        self.defer(trigger=Count(n={batched}, pause={pause}), method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):
        for event in events:
            record("handle", event.payload["i"], context["ti"].try_number)
            yield event.payload["i"] * 10
        time.sleep({batch_seconds})


@dag(schedule=None, start_date=datetime(2026, 1, 1), default_args=DEFAULT_ARGS)
def {prefix}_wide():
    @task
    def work(n, **context):
        record("work", n, context["ti"].try_number)
        time.sleep({work_seconds})
        return n

    work.expand(n=list(range({wide})))


@dag(schedule=None, start_date=datetime(2026, 1, 1), default_args=DEFAULT_ARGS)
def {prefix}_stream():
    produced = Produce(task_id="produce", max_pending_events=50)

    @task
    def consume(event, **context):
        record("consume", event["i"], context["ti"].try_number)
        time.sleep({consume_seconds})
        return event["i"]

    consume.iterate(event=produced.output)
    Batches(task_id="batches", max_batch_size=10, max_batch_latency=0.2)


{prefix}_wide()
{prefix}_stream()
"""


def workload_dags(
    prefix: str,
    record: Path,
    *,
    wide: int,
    events: int,
    batched: int,
    pause: float,
    work_seconds: float,
    consume_seconds: float = 0.0,
    batch_seconds: float = 0.0,
    retries: int = 0,
) -> str:
    """DAGs ``<prefix>_wide`` (``wide`` mapped ``work`` tasks) and ``<prefix>_stream`` (a
    trigger of ``events`` events streamed to ``consume.iterate()``, and ``batched`` events
    handled in batches by ``batches``), recording every execution in ``record``."""
    default_args = f'{{"retries": {retries}, "retry_delay": timedelta(0)}}' if retries else "{}"
    return _SOURCE.format(
        prefix=prefix,
        record=str(record),
        default_args=default_args,
        wide=wide,
        events=events,
        batched=batched,
        pause=pause,
        work_seconds=work_seconds,
        consume_seconds=consume_seconds,
        batch_seconds=batch_seconds,
    )


def recorded(record: Path, kind: str) -> int:
    """How many executions of ``kind`` (work, consume, handle) the record holds."""
    return sum(1 for line in record.read_text().splitlines() if line.startswith(kind))


def stream(engine: Engine, dag_id: str, task_id: str) -> list[Any]:
    """The items of a task's output stream, in order."""
    with engine.connect() as conn:
        ti_id = conn.scalar(
            select(TaskInstance.id).where(
                TaskInstance.dag_id == dag_id, TaskInstance.task_id == task_id
            )
        )
        return [json.loads(v) for v in read_items(conn, ti_id, limit=100_000)]
