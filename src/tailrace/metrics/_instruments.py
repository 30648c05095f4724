"""The instruments: Airflow's metric names where one exists, prefixed ``tailrace_``.

Built fresh by `build` each time metrics are activated (never registered in
prometheus_client's global registry: in multiprocess mode the collector reads the files
the values are written to, so a registry would only get in the way of a second
activation in one process, as in the tests). `NOOP` stands in when metrics are off: the
same attributes, every call does nothing.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Gauge, Histogram

PREFIX = "tailrace_"

# Seconds: a scheduler loop takes milliseconds, a run or a task minutes to hours.
_FAST = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_SLOW = (0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 10800.0, 86400.0)
_LAG = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

_TASK = ("dag_id", "task_id")


class _Noop:
    """Every instrument when metrics are off."""

    def labels(self, *_: Any, **__: Any) -> _Noop:
        return self

    def inc(self, amount: float = 1) -> None:
        pass

    def dec(self, amount: float = 1) -> None:
        pass

    def set(self, value: float) -> None:
        pass

    def observe(self, amount: float) -> None:
        pass


class Instruments:
    """What each component records; ``enabled`` is False for the no-op set."""

    enabled = True

    def __init__(self) -> None:
        # -- scheduler (Airflow: scheduler_heartbeat, scheduler.scheduler_loop_duration)
        self.scheduler_heartbeat = _counter(
            "scheduler_heartbeat", "Scheduler heartbeats (Airflow's scheduler_heartbeat)."
        )
        self.scheduler_loop_duration = _histogram(
            "scheduler_scheduler_loop_duration_seconds",
            "How long one scheduler step took, waiting excluded.",
            buckets=_FAST,
        )
        # -- DAG processing (Airflow: dag_processing.total_parse_time, .import_errors)
        self.dag_processing_total_parse_time = _gauge(
            "dag_processing_total_parse_time_seconds",
            "How long the last parse of every DAG folder took.",
        )
        self.dag_processing_import_errors = _gauge(
            "dag_processing_import_errors", "DAG files that currently fail to import."
        )
        # -- executor (Airflow: executor.open_slots, .queued_tasks, .running_tasks)
        self.executor_open_slots = _gauge(
            "executor_open_slots", "Local executor: worker processes free for a task."
        )
        self.executor_queued_tasks = _gauge(
            "executor_queued_tasks", "Local executor: tasks waiting for a worker process."
        )
        self.executor_running_tasks = _gauge(
            "executor_running_tasks", "Local executor: tasks running in worker processes."
        )
        # -- task instances (Airflow: ti.finish, ti_successes, ti_failures, task.duration)
        self.ti_finish = _counter(
            "ti_finish",
            "Task instances that reached a finished state, by state.",
            (*_TASK, "state"),
        )
        self.ti_successes = _counter("ti_successes", "Task instances that succeeded.")
        self.ti_failures = _counter("ti_failures", "Task instances that failed.")
        self.task_duration = _histogram(
            "task_duration_seconds",
            "How long a try ran its code in a worker process.",
            _TASK,
            buckets=_SLOW,
        )
        # -- DAG runs (Airflow: dagrun.duration.success / .failed)
        self.dagrun_duration = _histogram(
            "dagrun_duration_seconds",
            "How long finished DAG runs took, from start to end, by state.",
            ("dag_id", "state"),
            buckets=_SLOW,
        )
        # -- deadline alerts (Airflow: deadline_alerts.deadline_missed)
        self.deadlines_missed = _counter(
            "deadline_alerts_deadline_missed",
            "Deadlines runs missed (their callbacks handed to a worker or the triggerer).",
            ("dag_id",),
        )
        # -- triggerer (Airflow: triggers.running, triggerer.capacity_left,
        #    triggers.blocked_main_thread, triggers.failed, triggers.succeeded)
        self.triggers_running = _gauge("triggers_running", "Triggers this triggerer runs.")
        self.triggerer_capacity_left = _gauge(
            "triggerer_capacity_left", "Triggers this triggerer could still take on."
        )
        self.triggers_blocked_main_thread = _counter(
            "triggers_blocked_main_thread",
            "Times a trigger blocked the triggerer's event loop past the warning threshold.",
        )
        self.triggers_failed = _counter("triggers_failed", "Trigger runs that raised.")
        self.triggers_succeeded = _counter(
            "triggers_succeeded", "Trigger runs that ended without an error."
        )
        # -- streaming
        self.stream_events_produced = _counter(
            "stream_events_produced",
            "Events triggers yielded and the triggerer made durable, by consuming task.",
            _TASK,
        )
        self.stream_events_acknowledged = _counter(
            "stream_events_acknowledged",
            "Events their consumer acknowledged (committed with its output).",
            _TASK,
        )
        self.stream_backpressure_pauses = _counter(
            "stream_backpressure_pauses",
            "Times a trigger was paused, max_pending_events ahead of its consumer.",
            _TASK,
        )
        self.stream_event_ack_lag = _histogram(
            "stream_event_ack_lag_seconds",
            "Per acknowledgement: how long the oldest event it acknowledged had waited since "
            "its trigger yielded it.",
            _TASK,
            buckets=_LAG,
        )
        self.iterate_instances_created = _counter(
            "iterate_instances_created",
            "Mapped instances .iterate() created as items arrived.",
            _TASK,
        )
        self.iterate_expansion_pass_duration = _histogram(
            "iterate_expansion_pass_duration_seconds",
            "How long one scheduler pass spent creating an .iterate() task's instances.",
            _TASK,
            buckets=_FAST,
        )
        self.iterate_expansion_pass_instances = _histogram(
            "iterate_expansion_pass_instances",
            "Instances one pass created for an .iterate() task (bounded by "
            "iterate_expansion_batch).",
            _TASK,
            buckets=(1, 10, 50, 100, 500, 1000, 2500, 5000, 10000, 50000),
        )
        # -- the Celery executor's batches (ADR 0051)
        self.celery_batched_tries = _counter(
            "celery_batched_tries",
            "Tries sent to Celery workers several to a message, while the broker held a backlog.",
        )
        self.celery_tries_handed_back = _counter(
            "celery_tries_handed_back",
            "Tries of a batch that a worker process sent back to the broker unbegun.",
        )
        # -- API
        self.api_requests = _counter(
            "api_requests",
            "HTTP requests the api-server answered, by route template and status.",
            ("method", "route", "status"),
        )
        self.api_request_duration = _histogram(
            "api_request_duration_seconds",
            "How long the api-server took to answer, by route template.",
            ("method", "route"),
            buckets=_FAST,
        )


class _NoopInstruments:
    enabled = False

    def __getattr__(self, name: str) -> _Noop:
        return _NOOP_INSTRUMENT


_NOOP_INSTRUMENT = _Noop()
NOOP: Any = _NoopInstruments()


def _counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
    return Counter(PREFIX + name, doc, labels, registry=None)


def _gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
    # Set by one process of a component; the sum over live processes is that value (and
    # a process that died stops counting once its files are marked dead).
    return Gauge(PREFIX + name, doc, labels, registry=None, multiprocess_mode="livesum")


def _histogram(
    name: str, doc: str, labels: tuple[str, ...] = (), *, buckets: tuple[float, ...]
) -> Histogram:
    return Histogram(PREFIX + name, doc, labels, registry=None, buckets=buckets)
