"""The metadata schema. Alembic migrations under ``tailrace/db/migrations`` create it.

Payload columns (XCom values, trigger event payloads, stream items) hold JSON *text*
encoded by ``tailrace.serialization.dumps``: producers encode once, consumers decode once,
and the database never re-encodes them. Metadata columns (conf, kwargs) use ``JSON``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from tailrace.db.types import UTCDateTime

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

ID_LEN = 250


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Dag(Base):
    __tablename__ = "dag"

    dag_id: Mapped[str] = mapped_column(String(ID_LEN), primary_key=True)
    fileloc: Mapped[str] = mapped_column(Text)
    is_paused: Mapped[bool] = mapped_column(Boolean, default=False)
    is_active: Mapped[bool] = mapped_column(Boolean, default=True)
    latest_version_id: Mapped[int | None] = mapped_column(Integer)
    schedule_description: Mapped[str] = mapped_column(String(ID_LEN), default="")
    description: Mapped[str | None] = mapped_column(Text)
    tags: Mapped[list[str]] = mapped_column(JSON, default=list)
    max_active_runs: Mapped[int] = mapped_column(Integer, default=16)
    # The next scheduled run the scheduler will create: logical date and data interval.
    next_dagrun: Mapped[datetime | None] = mapped_column(UTCDateTime)
    next_dagrun_interval_end: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_parsed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The DAG's own stream_retention (seconds), overriding the setting; None: the setting.
    stream_retention: Mapped[float | None] = mapped_column(Float)


class DagVersion(Base):
    __tablename__ = "dag_version"
    __table_args__ = (UniqueConstraint("dag_id", "version_number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dag_id: Mapped[str] = mapped_column(ForeignKey("dag.dag_id", ondelete="CASCADE"))
    version_number: Mapped[int] = mapped_column(Integer)
    # sha256 of ``data``: a re-parse that changes nothing creates no version.
    hash: Mapped[str] = mapped_column(String(64))
    data: Mapped[str] = mapped_column(Text)  # SerializedDag as JSON
    fileloc: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class DagRun(Base):
    __tablename__ = "dag_run"
    __table_args__ = (
        UniqueConstraint("dag_id", "run_id"),
        Index("ix_dag_run_state_dag_id", "state", "dag_id"),
        # Retention and `db clean` find finished runs by when they ended.
        Index("ix_dag_run_end_date", "end_date"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dag_id: Mapped[str] = mapped_column(ForeignKey("dag.dag_id", ondelete="CASCADE"))
    run_id: Mapped[str] = mapped_column(String(ID_LEN))
    dag_version_id: Mapped[int] = mapped_column(ForeignKey("dag_version.id"))
    run_type: Mapped[str] = mapped_column(String(20))
    state: Mapped[str] = mapped_column(String(20))
    logical_date: Mapped[datetime | None] = mapped_column(UTCDateTime)
    data_interval_start: Mapped[datetime | None] = mapped_column(UTCDateTime)
    data_interval_end: Mapped[datetime | None] = mapped_column(UTCDateTime)
    conf: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    queued_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    start_date: Mapped[datetime | None] = mapped_column(UTCDateTime)
    end_date: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # A replay: the run_id (same DAG) whose retained streams this run reads.
    replay_of: Mapped[str | None] = mapped_column(String(ID_LEN))
    # The backfill that created (or last reprocessed) this run, as Airflow's dag_run has.
    backfill_id: Mapped[int | None] = mapped_column(Integer)


class Backfill(Base):
    """Airflow 3's backfill: runs of a DAG for the logical dates of a range, created at
    once (queued) and started at most ``max_active_runs`` at a time, apart from the DAG's
    own ``max_active_runs``."""

    __tablename__ = "backfill"
    __table_args__ = (Index("ix_backfill_dag_id", "dag_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dag_id: Mapped[str] = mapped_column(ForeignKey("dag.dag_id", ondelete="CASCADE"))
    from_date: Mapped[datetime] = mapped_column(UTCDateTime)
    to_date: Mapped[datetime] = mapped_column(UTCDateTime)
    dag_run_conf: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # A paused backfill's queued runs wait; those already running go on.
    is_paused: Mapped[bool] = mapped_column(Boolean, default=False)
    reprocess_behavior: Mapped[str] = mapped_column(String(20))
    max_active_runs: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # Set when it is cancelled; a backfill whose runs all finished is complete as well
    # (computed when read: the scheduler does no bookkeeping for it).
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    triggering_user_name: Mapped[str | None] = mapped_column(String(ID_LEN))


class HITLDetail(Base):
    """Airflow 3.1's human-in-the-loop request of a deferred task instance (written by its
    trigger in the triggerer, once per try) and, once given, the response (from the API,
    the UI, the CLI or the timeout's defaults)."""

    __tablename__ = "hitl_detail"

    ti_id: Mapped[int] = mapped_column(
        ForeignKey("task_instance.id", ondelete="CASCADE"), primary_key=True
    )
    subject: Mapped[str] = mapped_column(Text)
    body: Mapped[str | None] = mapped_column(Text)
    options: Mapped[list[str]] = mapped_column(JSON)
    defaults: Mapped[list[str] | None] = mapped_column(JSON)
    multiple: Mapped[bool] = mapped_column(Boolean, default=False)
    params: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    responded_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # None with a response: the timeout's defaults were taken.
    responded_by: Mapped[str | None] = mapped_column(String(ID_LEN))
    chosen_options: Mapped[list[str] | None] = mapped_column(JSON)
    params_input: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class BackfillDagRun(Base):
    """One logical date of a backfill: the run it created or reprocessed, or why none
    (``exception_reason``: "already exists", "in flight"), and its place in the order."""

    __tablename__ = "backfill_dag_run"
    __table_args__ = (
        UniqueConstraint("backfill_id", "dag_run_id"),
        # The scheduler finds a queued run's place in its backfill by the run.
        Index("ix_backfill_dag_run_dag_run_id", "dag_run_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    backfill_id: Mapped[int] = mapped_column(ForeignKey("backfill.id", ondelete="CASCADE"))
    dag_run_id: Mapped[int | None] = mapped_column(ForeignKey("dag_run.id", ondelete="SET NULL"))
    exception_reason: Mapped[str | None] = mapped_column(String(50))
    logical_date: Mapped[datetime] = mapped_column(UTCDateTime)
    sort_ordinal: Mapped[int] = mapped_column(Integer)


class TaskInstance(Base):
    __tablename__ = "task_instance"
    __table_args__ = (
        UniqueConstraint("dag_run_id", "task_id", "map_index"),
        Index("ix_task_instance_state", "state"),
        Index("ix_task_instance_dag_id_run_id", "dag_id", "run_id"),
        # A mapped task's instances by state in index order (planning a page at a time).
        Index("ix_task_instance_run_task_state", "dag_run_id", "task_id", "state", "map_index"),
        # A run's unmapped instances and placeholders (map_index = -1).
        Index("ix_task_instance_run_map_index", "dag_run_id", "map_index"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dag_run_id: Mapped[int] = mapped_column(ForeignKey("dag_run.id", ondelete="CASCADE"))
    dag_id: Mapped[str] = mapped_column(String(ID_LEN))
    run_id: Mapped[str] = mapped_column(String(ID_LEN))
    task_id: Mapped[str] = mapped_column(String(ID_LEN))
    map_index: Mapped[int] = mapped_column(Integer, default=-1)
    state: Mapped[str | None] = mapped_column(String(20))
    try_number: Mapped[int] = mapped_column(Integer, default=0)
    max_tries: Mapped[int] = mapped_column(Integer, default=0)
    operator: Mapped[str] = mapped_column(String(ID_LEN), default="")
    queue: Mapped[str] = mapped_column(String(ID_LEN), default="default")
    rendered_map_index: Mapped[str | None] = mapped_column(String(ID_LEN))
    queued_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    start_date: Mapped[datetime | None] = mapped_column(UTCDateTime)
    end_date: Mapped[datetime | None] = mapped_column(UTCDateTime)
    duration: Mapped[float | None] = mapped_column(Float)
    # When an up_for_retry instance may run again.
    next_retry_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    hostname: Mapped[str | None] = mapped_column(String(ID_LEN))
    pid: Mapped[int | None] = mapped_column(Integer)
    # The scheduler whose executor runs it; if that scheduler dies, another resets it.
    queued_by_job_id: Mapped[int | None] = mapped_column(ForeignKey("job.id", ondelete="SET NULL"))
    error: Mapped[str | None] = mapped_column(Text)
    # Deferral: the method to resume with, its kwargs, the trigger, and the deadline.
    next_method: Mapped[str | None] = mapped_column(String(ID_LEN))
    next_kwargs: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    trigger_id: Mapped[int | None] = mapped_column(
        ForeignKey("trigger.id", ondelete="SET NULL"), index=True
    )
    trigger_timeout: Mapped[datetime | None] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # A remote (Celery) worker's latest heartbeat for the running try.
    last_heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The Celery worker (its node name) running the try: when it is lost, so is the try.
    worker_name: Mapped[str | None] = mapped_column(String(ID_LEN))
    # Tries lost with their worker and run again without costing a retry (ADR 0024).
    lost_tries: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # The pool it takes slots from while queued or running, how many, and its effective
    # priority weight (its weight_rule applied): dispatch reads these, not the DAG.
    pool: Mapped[str] = mapped_column(String(ID_LEN), server_default="default_pool")
    pool_slots: Mapped[int] = mapped_column(Integer, server_default="1")
    priority_weight: Mapped[int] = mapped_column(Integer, server_default="1")


class DagCallback(Base):
    """A callback a worker runs for the scheduler: a finished run's DAG callback
    (``on_success_callback`` / ``on_failure_callback``), recorded with the run's end, or a
    task's for a try that ended without a worker (``task_instance_id`` set); pending,
    queued, success or failed."""

    __tablename__ = "dag_callback"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    # Indexed: deleting a run (db clean) looks its callbacks up.
    dag_run_id: Mapped[int] = mapped_column(
        ForeignKey("dag_run.id", ondelete="CASCADE"), index=True
    )
    kind: Mapped[str] = mapped_column(String(20))  # success | failure (| retry | skipped)
    # Airflow's context["reason"]: success, task_failure or timed_out.
    reason: Mapped[str] = mapped_column(String(50))
    state: Mapped[str] = mapped_column(String(20), index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    queued_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    error: Mapped[str | None] = mapped_column(Text)
    # A task's callback (ADR 0033): the try that ended without a worker, and its error.
    task_instance_id: Mapped[int | None] = mapped_column(Integer)
    try_number: Mapped[int | None] = mapped_column(Integer)
    task_error: Mapped[str | None] = mapped_column(Text)
    # The scheduler that handed it to its executor: if that scheduler stops before its
    # end is heard, another puts it back to pending (ADR 0034).
    queued_by_job_id: Mapped[int | None] = mapped_column(Integer)


class Deadline(Base):
    """A run's deadline alert (Airflow 3.1): created with the run (or, counted from the
    queue time, each time it is queued), deleted when the run finishes in time; once
    ``missed``, its callback is a ``dag_callback`` row a worker runs (a SyncCallback) or a
    trigger the triggerer runs (an AsyncCallback, whose outcome is kept here)."""

    __tablename__ = "deadline"
    __table_args__ = (
        # The scheduler's timer: the earliest deadline not yet missed.
        Index("ix_deadline_missed_deadline_time", "missed", "deadline_time"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dag_run_id: Mapped[int] = mapped_column(
        ForeignKey("dag_run.id", ondelete="CASCADE"), index=True
    )
    # Which alert of the run's DAG version (its ``deadline`` list), and the alert's name.
    alert_index: Mapped[int] = mapped_column(Integer)
    name: Mapped[str | None] = mapped_column(String(ID_LEN))
    deadline_time: Mapped[datetime] = mapped_column(UTCDateTime)
    missed: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    missed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # No foreign keys: both go with the run (or `db clean`) without a lookup here.
    dag_callback_id: Mapped[int | None] = mapped_column(Integer, index=True)
    trigger_id: Mapped[int | None] = mapped_column(Integer, index=True)
    # An AsyncCallback's end, as the triggerer wrote it: queued, success or failed.
    callback_state: Mapped[str | None] = mapped_column(String(20))
    callback_error: Mapped[str | None] = mapped_column(Text)


class Pool(Base):
    """Airflow's pools: at most ``slots`` slots' worth of task instances queued or running
    (and deferred, with ``include_deferred``) at once."""

    __tablename__ = "pool"

    name: Mapped[str] = mapped_column(String(ID_LEN), primary_key=True)
    slots: Mapped[int] = mapped_column(Integer)
    description: Mapped[str | None] = mapped_column(Text)
    include_deferred: Mapped[bool] = mapped_column(Boolean, default=False)


class TaskInstanceHistory(Base):
    """One row per finished try of a task instance."""

    __tablename__ = "task_instance_history"
    __table_args__ = (UniqueConstraint("task_instance_id", "try_number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    task_instance_id: Mapped[int] = mapped_column(
        ForeignKey("task_instance.id", ondelete="CASCADE")
    )
    try_number: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(20))
    start_date: Mapped[datetime | None] = mapped_column(UTCDateTime)
    end_date: Mapped[datetime | None] = mapped_column(UTCDateTime)
    duration: Mapped[float | None] = mapped_column(Float)
    hostname: Mapped[str | None] = mapped_column(String(ID_LEN))
    error: Mapped[str | None] = mapped_column(Text)


class XCom(Base):
    __tablename__ = "xcom"
    __table_args__ = (UniqueConstraint("dag_run_id", "task_id", "map_index", "key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dag_run_id: Mapped[int] = mapped_column(ForeignKey("dag_run.id", ondelete="CASCADE"))
    task_id: Mapped[str] = mapped_column(String(ID_LEN))
    map_index: Mapped[int] = mapped_column(Integer, default=-1)
    key: Mapped[str] = mapped_column(String(512))
    value: Mapped[str] = mapped_column(Text)  # JSON text
    # For list values: their length, so the scheduler can expand without decoding.
    length: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class RenderedTaskInstanceFields(Base):
    """A try's templated fields as rendered (Airflow's ``rendered_task_instance_fields``),
    reported by the worker with the try's result."""

    __tablename__ = "rendered_task_instance_fields"

    task_instance_id: Mapped[int] = mapped_column(
        ForeignKey("task_instance.id", ondelete="CASCADE"), primary_key=True
    )
    try_number: Mapped[int] = mapped_column(Integer, primary_key=True)
    # {field: the rendered value's text}, masked and cut like Airflow's.
    rendered_fields: Mapped[dict[str, str]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class Trigger(Base):
    __tablename__ = "trigger"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    classpath: Mapped[str] = mapped_column(String(1000))
    kwargs: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # The current run of this trigger; a fresh run gets a new id and restarts the sequence.
    trigger_run_id: Mapped[str | None] = mapped_column(String(64))
    # W3C trace context of the span that deferred (tracing on): its trigger runs' parent.
    traceparent: Mapped[str | None] = mapped_column(String(64))
    # Lease: the triggerer (job) holding it, valid while that job heartbeats — one row to
    # renew however many triggers it runs — and a fencing epoch bumped on each claim.
    triggerer_job_id: Mapped[int | None] = mapped_column(
        ForeignKey("job.id", ondelete="SET NULL"), index=True
    )
    lease_epoch: Mapped[int] = mapped_column(Integer, default=0)
    # How its task consumes events: "classic" (the resume method, once per event, in
    # order), "batch" (handle_trigger_events) or "direct" (payloads straight into the
    # task's output stream). And how far the trigger may run ahead of that consumer.
    consumer: Mapped[str] = mapped_column(String(20), default="classic")
    max_pending_events: Mapped[int | None] = mapped_column(Integer)
    # What its task's deferral timeout does: "failed", "failed_no_retry" or "skipped".
    timeout_outcome: Mapped[str] = mapped_column(String(20), default="failed")
    checkpoint: Mapped[Any | None] = mapped_column(JSON)
    next_sequence: Mapped[int] = mapped_column(BigInteger, default=0)
    acked_sequence: Mapped[int] = mapped_column(BigInteger, default=-1)
    # Events up to here were deleted once acknowledged: one re-yielded after a failover is
    # dropped, as the unique key drops one still stored.
    pruned_sequence: Mapped[int] = mapped_column(BigInteger, default=-1, server_default="-1")
    completed: Mapped[bool] = mapped_column(Boolean, default=False)
    # The redelivery window's clock (ADR 0032): the acknowledgement as it stood at
    # ``dedup_mark_at``; once the window has passed since, the dedup records at or below
    # it go, and the mark moves on.
    dedup_mark_sequence: Mapped[int | None] = mapped_column(BigInteger)
    dedup_mark_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class TriggerEvent(Base):
    __tablename__ = "trigger_event"
    __table_args__ = (UniqueConstraint("trigger_id", "sequence_index"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    trigger_id: Mapped[int] = mapped_column(ForeignKey("trigger.id", ondelete="CASCADE"))
    trigger_run_id: Mapped[str] = mapped_column(String(64))
    sequence_index: Mapped[int] = mapped_column(BigInteger)
    payload: Mapped[str] = mapped_column(Text)  # JSON text
    is_last: Mapped[bool] = mapped_column(Boolean, default=False)
    checkpoint: Mapped[Any | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # The source's own id of what the event carries (a broker's message id); a
    # redelivery is recognised by its TriggerDedup record, which outlives the event.
    dedup_key: Mapped[str | None] = mapped_column(String(512))


class TriggerDedup(Base):
    """A message a trigger stored an event for, by its source's id (ADR 0032): a broker
    redelivering it within the redelivery window is recognised though the event itself
    was consumed and pruned."""

    __tablename__ = "trigger_dedup"
    __table_args__ = (
        Index("uq_trigger_dedup_trigger_id_dedup_key", "trigger_id", "dedup_key", unique=True),
    )

    trigger_id: Mapped[int] = mapped_column(
        ForeignKey("trigger.id", ondelete="CASCADE"), primary_key=True
    )
    # The event's: a redelivery is acknowledged to its source once this one is.
    sequence_index: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    dedup_key: Mapped[str] = mapped_column(String(512))
    committed_at: Mapped[datetime] = mapped_column(UTCDateTime)


class TaskTimeline(Base):
    """A task instance's state changes (and the batches of trigger events handed to it),
    each with its time and try: what the run timeline draws segments from."""

    __tablename__ = "task_timeline"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    task_instance_id: Mapped[int] = mapped_column(
        ForeignKey("task_instance.id", ondelete="CASCADE"), index=True
    )
    dag_run_id: Mapped[int] = mapped_column(
        ForeignKey("dag_run.id", ondelete="CASCADE"), index=True
    )
    try_number: Mapped[int] = mapped_column(Integer)
    # queue, start, defer, resume, finish, … (transitions' kinds), or "events".
    kind: Mapped[str] = mapped_column(String(20))
    state: Mapped[str | None] = mapped_column(String(20))
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    detail: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class Stream(Base):
    """Header of a task's output stream: items live in ``stream_item``."""

    __tablename__ = "stream"
    __table_args__ = (UniqueConstraint("task_instance_id", "key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    task_instance_id: Mapped[int] = mapped_column(
        ForeignKey("task_instance.id", ondelete="CASCADE")
    )
    key: Mapped[str] = mapped_column(String(512), default="return_value")
    closed: Mapped[bool] = mapped_column(Boolean, default=False)
    length: Mapped[int] = mapped_column(BigInteger, default=0)
    acknowledged: Mapped[int] = mapped_column(BigInteger, default=-1)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    closed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # When retention (or `db clean`) removed the items; the header stays to say so.
    items_removed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class StreamItem(Base):
    __tablename__ = "stream_item"

    stream_id: Mapped[int] = mapped_column(
        ForeignKey("stream.id", ondelete="CASCADE"), primary_key=True
    )
    index: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    value: Mapped[str] = mapped_column(Text)  # JSON text


class ImportError_(Base):
    __tablename__ = "import_error"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    filename: Mapped[str] = mapped_column(Text, unique=True)
    dag_id: Mapped[str | None] = mapped_column(String(ID_LEN))
    task_id: Mapped[str | None] = mapped_column(String(ID_LEN))
    line: Mapped[int | None] = mapped_column(Integer)
    message: Mapped[str] = mapped_column(Text)
    stacktrace: Mapped[str] = mapped_column(Text)
    timestamp: Mapped[datetime] = mapped_column(UTCDateTime)


class Job(Base):
    """A running component (scheduler, triggerer, worker pool) and its heartbeat."""

    __tablename__ = "job"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_type: Mapped[str] = mapped_column(String(30))
    hostname: Mapped[str] = mapped_column(String(ID_LEN))
    pid: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(20))
    start_date: Mapped[datetime] = mapped_column(UTCDateTime)
    latest_heartbeat: Mapped[datetime] = mapped_column(UTCDateTime)


class Connection(Base):
    __tablename__ = "connection"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    conn_id: Mapped[str] = mapped_column(String(ID_LEN), unique=True)
    # Fernet-encrypted when is_encrypted (rows from before 0004 are plain text).
    uri: Mapped[str] = mapped_column(Text)
    description: Mapped[str | None] = mapped_column(Text)
    is_encrypted: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class Variable(Base):
    __tablename__ = "variable"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(String(ID_LEN), unique=True)
    # Fernet-encrypted, as connections' URIs.
    val: Mapped[str] = mapped_column(Text)
    description: Mapped[str | None] = mapped_column(Text)
    is_encrypted: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class User(Base):
    __tablename__ = "user"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    username: Mapped[str] = mapped_column(String(ID_LEN), unique=True)
    password_hash: Mapped[str] = mapped_column(String(512))
    role: Mapped[str] = mapped_column(String(20))  # admin | viewer
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class ApiToken(Base):
    __tablename__ = "api_token"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("user.id", ondelete="CASCADE"))
    token_hash: Mapped[str] = mapped_column(String(128), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


# -- assets (Airflow 3's data-aware scheduling) ------------------------------------------

ASSET_KEY_LEN = 1500  # Airflow's limit on an asset's name and URI


class Asset(Base):
    """An asset some DAG names (or an external event created); never deleted by a parse,
    so its events outlive the DAG that defined it."""

    __tablename__ = "asset"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(ASSET_KEY_LEN), unique=True)
    uri: Mapped[str] = mapped_column(String(ASSET_KEY_LEN), unique=True)
    group: Mapped[str] = mapped_column(String(ID_LEN), default="asset")
    extra: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class AssetAlias(Base):
    __tablename__ = "asset_alias"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(ASSET_KEY_LEN), unique=True)
    group: Mapped[str] = mapped_column(String(ID_LEN), default="asset")


class AssetAliasAsset(Base):
    """The assets an alias has resolved to (a task emitted their events through it)."""

    __tablename__ = "asset_alias_asset"

    alias_id: Mapped[int] = mapped_column(
        ForeignKey("asset_alias.id", ondelete="CASCADE"), primary_key=True
    )
    asset_id: Mapped[int] = mapped_column(
        ForeignKey("asset.id", ondelete="CASCADE"), primary_key=True, index=True
    )


class AssetEvent(Base):
    """One update of an asset: by a task that succeeded, a watcher, or the REST API."""

    __tablename__ = "asset_event"
    __table_args__ = (Index("ix_asset_event_asset_id_id", "asset_id", "id"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    asset_id: Mapped[int] = mapped_column(ForeignKey("asset.id", ondelete="CASCADE"))
    extra: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    timestamp: Mapped[datetime] = mapped_column(UTCDateTime)
    source_dag_id: Mapped[str | None] = mapped_column(String(ID_LEN))
    source_task_id: Mapped[str | None] = mapped_column(String(ID_LEN))
    source_run_id: Mapped[str | None] = mapped_column(String(ID_LEN))
    source_map_index: Mapped[int] = mapped_column(Integer, default=-1)
    source_alias_name: Mapped[str | None] = mapped_column(String(ASSET_KEY_LEN))
    # A watcher's event: its trigger. The API's: "api".
    source_trigger_id: Mapped[int | None] = mapped_column(
        ForeignKey("trigger.id", ondelete="SET NULL"), index=True
    )
    # Where the event came from, once: a broker's message id, a client's idempotency key.
    dedup_key: Mapped[str | None] = mapped_column(String(512), unique=True)


class AssetDagRunQueue(Base):
    """Events a DAG scheduled on assets has not run for yet (Airflow's ``asset_dag_run_queue``,
    by event rather than by asset so each run links exactly the events that started it)."""

    __tablename__ = "asset_dag_run_queue"

    event_id: Mapped[int] = mapped_column(
        ForeignKey("asset_event.id", ondelete="CASCADE"), primary_key=True
    )
    target_dag_id: Mapped[str] = mapped_column(
        ForeignKey("dag.dag_id", ondelete="CASCADE"), primary_key=True, index=True
    )
    asset_id: Mapped[int] = mapped_column(ForeignKey("asset.id", ondelete="CASCADE"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class DagRunAssetEvent(Base):
    """The events that started an asset-triggered run."""

    __tablename__ = "dag_run_asset_event"

    dag_run_id: Mapped[int] = mapped_column(
        ForeignKey("dag_run.id", ondelete="CASCADE"), primary_key=True
    )
    event_id: Mapped[int] = mapped_column(
        ForeignKey("asset_event.id", ondelete="CASCADE"), primary_key=True, index=True
    )


class AssetReference(Base):
    """Which DAG names which asset or alias, and how: "schedule", "outlet" or "inlet"
    (with the task). Rewritten each time the DAG gets a new version."""

    __tablename__ = "asset_reference"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dag_id: Mapped[str] = mapped_column(ForeignKey("dag.dag_id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(20))
    task_id: Mapped[str | None] = mapped_column(String(ID_LEN))
    asset_id: Mapped[int | None] = mapped_column(
        ForeignKey("asset.id", ondelete="CASCADE"), index=True
    )
    alias_id: Mapped[int | None] = mapped_column(
        ForeignKey("asset_alias.id", ondelete="CASCADE"), index=True
    )


class AssetWatcher(Base):
    """A watcher of an asset and the trigger it runs; watchers with the same trigger
    (class and arguments) share its row, so one trigger run serves them all."""

    __tablename__ = "asset_watcher"

    asset_id: Mapped[int] = mapped_column(
        ForeignKey("asset.id", ondelete="CASCADE"), primary_key=True
    )
    name: Mapped[str] = mapped_column(String(ID_LEN), primary_key=True)
    trigger_id: Mapped[int] = mapped_column(
        ForeignKey("trigger.id", ondelete="CASCADE"), index=True
    )
    # The DAG whose file defines it: a trigger class defined there is loaded from it.
    dag_id: Mapped[str] = mapped_column(ForeignKey("dag.dag_id", ondelete="CASCADE"))
