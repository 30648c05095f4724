"""Values read from the database when Prometheus scrapes: they belong to no one process."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import Engine, func, select

from tailrace.db.models import TaskInstance, Trigger
from tailrace.metrics._instruments import PREFIX
from tailrace.state import TaskInstanceState as TIS

_CONSUMING = (TIS.DEFERRED, TIS.SCHEDULED, TIS.QUEUED, TIS.RUNNING)


class StreamCollector(Collector):
    """Events each stream's triggers have made durable and their consumers not yet
    acknowledged, by consuming task (dag_id, task_id; never run ids)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        pending = GaugeMetricFamily(
            PREFIX + "stream_events_pending",
            "Durable events not yet acknowledged by their consumer, by consuming task.",
            labels=["dag_id", "task_id"],
        )
        query = (
            select(
                TaskInstance.dag_id,
                TaskInstance.task_id,
                func.sum(Trigger.next_sequence - 1 - Trigger.acked_sequence),
            )
            .join(Trigger, Trigger.id == TaskInstance.trigger_id)
            .where(
                Trigger.next_sequence - 1 > Trigger.acked_sequence,
                # Streams still consumed: a finished task's leftovers are nobody's backlog.
                TaskInstance.state.in_(_CONSUMING),
            )
            .group_by(TaskInstance.dag_id, TaskInstance.task_id)
        )
        with self.engine.connect() as conn:
            for dag_id, task_id, n in conn.execute(query):
                pending.add_metric([dag_id, task_id], float(n or 0))
        yield pending
