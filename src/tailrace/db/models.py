"""The metadata schema. Alembic migrations under ``tailrace/db/migrations`` create it.

Payload columns (XCom values, trigger event payloads, stream items) hold JSON *text*
encoded by ``tailrace.serialization.dumps``: producers encode once, consumers decode once,
and the database never re-encodes them. Metadata columns (conf, kwargs) use ``JSON``.

Tables are SQLAlchemy Core tables declared as classes (ADR 0043): ``TaskInstance.state`` is
the column, typed ``Col[str | None]`` by the Python values it holds, and the class stands
for its table in ``select``, ``insert`` and ``update``. Nothing reads rows as objects, so
the ORM (whose import and mappers cost every command a tenth of a second) is not used.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.sql.elements import ColumnClause as Col

from tailrace.db.types import UTCDateTime

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

ID_LEN = 250
# A version of a run's unmapped instances (ADR 0052): a transaction id on PostgreSQL,
# which outgrows 32 bits; SQLite's INTEGER holds 64 already.
_VERSION = BigInteger().with_variant(Integer(), "sqlite")


class Base:
    """A table as a class: each ``Column`` attribute, named by the attribute, becomes a
    column of ``__table__`` (the attribute *is* that column, typed as the ``Col`` it is
    declared), and ``__table_args__`` adds its constraints and indexes."""

    metadata: ClassVar[MetaData] = MetaData(naming_convention=NAMING_CONVENTION)
    __tablename__: ClassVar[str]
    __table_args__: ClassVar[tuple[Any, ...]] = ()
    __table__: ClassVar[Table]

    def __init_subclass__(cls) -> None:
        columns = []
        for name, value in vars(cls).items():
            if isinstance(value, Column):
                value.name = value.key = name
                columns.append(value)
        cls.__table__ = Table(cls.__tablename__, cls.metadata, *columns, *cls.__table_args__)

    @classmethod
    def __clause_element__(cls) -> Table:
        return cls.__table__


class Dag(Base):
    __tablename__ = "dag"

    dag_id: Col[str] = Column(String(ID_LEN), primary_key=True)
    fileloc: Col[str] = Column(Text, nullable=False)
    is_paused: Col[bool] = Column(Boolean, default=False, nullable=False)
    is_active: Col[bool] = Column(Boolean, default=True, nullable=False)
    latest_version_id: Col[int | None] = Column(Integer)
    schedule_description: Col[str] = Column(String(ID_LEN), default="", nullable=False)
    description: Col[str | None] = Column(Text)
    tags: Col[list[str]] = Column(JSON, default=list, nullable=False)
    max_active_runs: Col[int] = Column(Integer, default=16, nullable=False)
    # The next scheduled run the scheduler will create: logical date and data interval.
    next_dagrun: Col[datetime | None] = Column(UTCDateTime)
    next_dagrun_interval_end: Col[datetime | None] = Column(UTCDateTime)
    last_parsed_at: Col[datetime | None] = Column(UTCDateTime)
    # The DAG's own stream_retention (seconds), overriding the setting; None: the setting.
    stream_retention: Col[float | None] = Column(Float)


class DagVersion(Base):
    __tablename__ = "dag_version"
    __table_args__ = (UniqueConstraint("dag_id", "version_number"),)

    id: Col[int] = Column(Integer, primary_key=True, autoincrement=True)
    dag_id: Col[str] = Column(ForeignKey("dag.dag_id", ondelete="CASCADE"), nullable=False)
    version_number: Col[int] = Column(Integer, nullable=False)
    # sha256 of ``data``: a re-parse that changes nothing creates no version.
    hash: Col[str] = Column(String(64), nullable=False)
    data: Col[str] = Column(Text, nullable=False)  # SerializedDag as JSON
    fileloc: Col[str] = Column(Text, nullable=False)
    created_at: Col[datetime] = Column(UTCDateTime, nullable=False)


class DagRun(Base):
    __tablename__ = "dag_run"
    __table_args__ = (
        UniqueConstraint("dag_id", "run_id"),
        Index("ix_dag_run_state_dag_id", "state", "dag_id"),
        # Retention and `db clean` find finished runs by when they ended.
        Index("ix_dag_run_end_date", "end_date"),
    )

    id: Col[int] = Column(Integer, primary_key=True, autoincrement=True)
    dag_id: Col[str] = Column(ForeignKey("dag.dag_id", ondelete="CASCADE"), nullable=False)
    run_id: Col[str] = Column(String(ID_LEN), nullable=False)
    dag_version_id: Col[int] = Column(ForeignKey("dag_version.id"), nullable=False)
    run_type: Col[str] = Column(String(20), nullable=False)
    state: Col[str] = Column(String(20), nullable=False)
    logical_date: Col[datetime | None] = Column(UTCDateTime)
    data_interval_start: Col[datetime | None] = Column(UTCDateTime)
    data_interval_end: Col[datetime | None] = Column(UTCDateTime)
    conf: Col[dict[str, Any]] = Column(JSON, default=dict, nullable=False)
    queued_at: Col[datetime | None] = Column(UTCDateTime)
    start_date: Col[datetime | None] = Column(UTCDateTime)
    end_date: Col[datetime | None] = Column(UTCDateTime)
    created_at: Col[datetime] = Column(UTCDateTime, nullable=False)
    # A replay: the run_id (same DAG) whose retained streams this run reads.
    replay_of: Col[str | None] = Column(String(ID_LEN))
    # The backfill that created (or last reprocessed) this run, as Airflow's dag_run has.
    backfill_id: Col[int | None] = Column(Integer)
    # Kept by triggers (ADR 0046, 0052): ti_version moves with every change of an unmapped
    # instance the scheduler's pass reads (SQLite; 0 on PostgreSQL), ti_reload_version
    # with one leaving the run (SQLite: that version; PostgreSQL: the transaction's id):
    # the pass reads back only what changed.
    ti_version: Col[int] = Column(Integer, default=0, server_default="0", nullable=False)
    ti_reload_version: Col[int] = Column(_VERSION, default=0, server_default="0", nullable=False)


class Backfill(Base):
    """Airflow 3's backfill: runs of a DAG for the logical dates of a range, created at
    once (queued) and started at most ``max_active_runs`` at a time, apart from the DAG's
    own ``max_active_runs``."""

    __tablename__ = "backfill"
    __table_args__ = (Index("ix_backfill_dag_id", "dag_id"),)

    id: Col[int] = Column(Integer, primary_key=True, autoincrement=True)
    dag_id: Col[str] = Column(ForeignKey("dag.dag_id", ondelete="CASCADE"), nullable=False)
    from_date: Col[datetime] = Column(UTCDateTime, nullable=False)
    to_date: Col[datetime] = Column(UTCDateTime, nullable=False)
    dag_run_conf: Col[dict[str, Any]] = Column(JSON, default=dict, nullable=False)
    # A paused backfill's queued runs wait; those already running go on.
    is_paused: Col[bool] = Column(Boolean, default=False, nullable=False)
    reprocess_behavior: Col[str] = Column(String(20), nullable=False)
    max_active_runs: Col[int] = Column(Integer, nullable=False)
    created_at: Col[datetime] = Column(UTCDateTime, nullable=False)
    # Set when it is cancelled; a backfill whose runs all finished is complete as well
    # (computed when read: the scheduler does no bookkeeping for it).
    completed_at: Col[datetime | None] = Column(UTCDateTime)
    updated_at: Col[datetime] = Column(UTCDateTime, nullable=False)
    triggering_user_name: Col[str | None] = Column(String(ID_LEN))


class HITLDetail(Base):
    """Airflow 3.1's human-in-the-loop request of a deferred task instance (written by its
    trigger in the triggerer, once per try) and, once given, the response (from the API,
    the UI, the CLI or the timeout's defaults)."""

    __tablename__ = "hitl_detail"

    ti_id: Col[int] = Column(ForeignKey("task_instance.id", ondelete="CASCADE"), primary_key=True)
    subject: Col[str] = Column(Text, nullable=False)
    body: Col[str | None] = Column(Text)
    options: Col[list[str]] = Column(JSON, nullable=False)
    defaults: Col[list[str] | None] = Column(JSON)
    multiple: Col[bool] = Column(Boolean, default=False, nullable=False)
    params: Col[dict[str, Any]] = Column(JSON, default=dict, nullable=False)
    created_at: Col[datetime] = Column(UTCDateTime, nullable=False)
    responded_at: Col[datetime | None] = Column(UTCDateTime)
    # None with a response: the timeout's defaults were taken.
    responded_by: Col[str | None] = Column(String(ID_LEN))
    chosen_options: Col[list[str] | None] = Column(JSON)
    params_input: Col[dict[str, Any] | None] = Column(JSON)


class BackfillDagRun(Base):
    """One logical date of a backfill: the run it created or reprocessed, or why none
    (``exception_reason``: "already exists", "in flight"), and its place in the order."""

    __tablename__ = "backfill_dag_run"
    __table_args__ = (
        UniqueConstraint("backfill_id", "dag_run_id"),
        # The scheduler finds a queued run's place in its backfill by the run.
        Index("ix_backfill_dag_run_dag_run_id", "dag_run_id"),
    )

    id: Col[int] = Column(Integer, primary_key=True, autoincrement=True)
    backfill_id: Col[int] = Column(ForeignKey("backfill.id", ondelete="CASCADE"), nullable=False)
    dag_run_id: Col[int | None] = Column(ForeignKey("dag_run.id", ondelete="SET NULL"))
    exception_reason: Col[str | None] = Column(String(50))
    logical_date: Col[datetime] = Column(UTCDateTime, nullable=False)
    sort_ordinal: Col[int] = Column(Integer, nullable=False)


class TaskInstance(Base):
    __tablename__ = "task_instance"
    __table_args__ = (
        UniqueConstraint("dag_run_id", "task_id", "map_index"),
        Index("ix_task_instance_state", "state"),
        Index("ix_task_instance_dag_id_run_id", "dag_id", "run_id"),
        # A mapped task's instances by state in index order (planning a page at a time).
        Index("ix_task_instance_run_task_state", "dag_run_id", "task_id", "state", "map_index"),
        # A run's unmapped instances and placeholders (map_index = -1).
        # Read back since a version (row_version: ADR 0046).
        Index("ix_task_instance_run_map_index", "dag_run_id", "map_index", "row_version"),
    )

    id: Col[int] = Column(Integer, primary_key=True, autoincrement=True)
    dag_run_id: Col[int] = Column(ForeignKey("dag_run.id", ondelete="CASCADE"), nullable=False)
    dag_id: Col[str] = Column(String(ID_LEN), nullable=False)
    run_id: Col[str] = Column(String(ID_LEN), nullable=False)
    task_id: Col[str] = Column(String(ID_LEN), nullable=False)
    map_index: Col[int] = Column(Integer, default=-1, nullable=False)
    state: Col[str | None] = Column(String(20))
    try_number: Col[int] = Column(Integer, default=0, nullable=False)
    max_tries: Col[int] = Column(Integer, default=0, nullable=False)
    operator: Col[str] = Column(String(ID_LEN), default="", nullable=False)
    queue: Col[str] = Column(String(ID_LEN), default="default", nullable=False)
    rendered_map_index: Col[str | None] = Column(String(ID_LEN))
    queued_at: Col[datetime | None] = Column(UTCDateTime)
    start_date: Col[datetime | None] = Column(UTCDateTime)
    end_date: Col[datetime | None] = Column(UTCDateTime)
    duration: Col[float | None] = Column(Float)
    # When an up_for_retry instance may run again.
    next_retry_at: Col[datetime | None] = Column(UTCDateTime)
    hostname: Col[str | None] = Column(String(ID_LEN))
    pid: Col[int | None] = Column(Integer)
    # The scheduler whose executor runs it; if that scheduler dies, another resets it.
    queued_by_job_id: Col[int | None] = Column(ForeignKey("job.id", ondelete="SET NULL"))
    error: Col[str | None] = Column(Text)
    # Deferral: the method to resume with, its kwargs, the trigger, and the deadline.
    next_method: Col[str | None] = Column(String(ID_LEN))
    next_kwargs: Col[dict[str, Any] | None] = Column(JSON)
    trigger_id: Col[int | None] = Column(ForeignKey("trigger.id", ondelete="SET NULL"), index=True)
    trigger_timeout: Col[datetime | None] = Column(UTCDateTime)
    updated_at: Col[datetime | None] = Column(UTCDateTime)
    # A remote (Celery) worker's latest heartbeat for the running try.
    last_heartbeat_at: Col[datetime | None] = Column(UTCDateTime)
    # The Celery worker (its node name) running the try: when it is lost, so is the try.
    worker_name: Col[str | None] = Column(String(ID_LEN))
    # Tries lost with their worker and run again without costing a retry (ADR 0024).
    lost_tries: Col[int] = Column(Integer, default=0, server_default="0", nullable=False)
    # The pool it takes slots from while queued or running, how many, and its effective
    # priority weight (its weight_rule applied): dispatch reads these, not the DAG.
    pool: Col[str] = Column(String(ID_LEN), server_default="default_pool", nullable=False)
    pool_slots: Col[int] = Column(Integer, server_default="1", nullable=False)
    priority_weight: Col[int] = Column(Integer, server_default="1", nullable=False)
    # When this unmapped row last changed in a column the pass reads (ADR 0046, 0052):
    # the run's ti_version on SQLite, the writing transaction's id on PostgreSQL.
    row_version: Col[int] = Column(_VERSION, default=0, server_default="0", nullable=False)


class DagCallback(Base):
    """A callback a worker runs for the scheduler: a finished run's DAG callback
    (``on_success_callback`` / ``on_failure_callback``), recorded with the run's end, or a
    task's for a try that ended without a worker (``task_instance_id`` set); pending,
    queued, success or failed."""

    __tablename__ = "dag_callback"

    id: Col[int] = Column(Integer, primary_key=True, autoincrement=True)
    # Indexed: deleting a run (db clean) looks its callbacks up.
    dag_run_id: Col[int] = Column(
        ForeignKey("dag_run.id", ondelete="CASCADE"), index=True, nullable=False
    )
    kind: Col[str] = Column(String(20), nullable=False)  # success | failure (| retry | skipped)
    # Airflow's context["reason"]: success, task_failure or timed_out.
    reason: Col[str] = Column(String(50), nullable=False)
    state: Col[str] = Column(String(20), index=True, nullable=False)
    created_at: Col[datetime] = Column(UTCDateTime, nullable=False)
    queued_at: Col[datetime | None] = Column(UTCDateTime)
    finished_at: Col[datetime | None] = Column(UTCDateTime)
    error: Col[str | None] = Column(Text)
    # A task's callback (ADR 0033): the try that ended without a worker, and its error.
    task_instance_id: Col[int | None] = Column(Integer)
    try_number: Col[int | None] = Column(Integer)
    task_error: Col[str | None] = Column(Text)
    # The scheduler that handed it to its executor: if that scheduler stops before its
    # end is heard, another puts it back to pending (ADR 0034).
    queued_by_job_id: Col[int | None] = Column(Integer)


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

    id: Col[int] = Column(Integer, primary_key=True, autoincrement=True)
    dag_run_id: Col[int] = Column(
        ForeignKey("dag_run.id", ondelete="CASCADE"), index=True, nullable=False
    )
    # Which alert of the run's DAG version (its ``deadline`` list), and the alert's name.
    alert_index: Col[int] = Column(Integer, nullable=False)
    name: Col[str | None] = Column(String(ID_LEN))
    deadline_time: Col[datetime] = Column(UTCDateTime, nullable=False)
    missed: Col[bool] = Column(Boolean, default=False, nullable=False)
    created_at: Col[datetime] = Column(UTCDateTime, nullable=False)
    missed_at: Col[datetime | None] = Column(UTCDateTime)
    # No foreign keys: both go with the run (or `db clean`) without a lookup here.
    dag_callback_id: Col[int | None] = Column(Integer, index=True)
    trigger_id: Col[int | None] = Column(Integer, index=True)
    # An AsyncCallback's end, as the triggerer wrote it: queued, success or failed.
    callback_state: Col[str | None] = Column(String(20))
    callback_error: Col[str | None] = Column(Text)


class Pool(Base):
    """Airflow's pools: at most ``slots`` slots' worth of task instances queued or running
    (and deferred, with ``include_deferred``) at once."""

    __tablename__ = "pool"

    name: Col[str] = Column(String(ID_LEN), primary_key=True)
    slots: Col[int] = Column(Integer, nullable=False)
    description: Col[str | None] = Column(Text)
    include_deferred: Col[bool] = Column(Boolean, default=False, nullable=False)


class DeadLetter(Base):
    """A trigger event of a batch whose handling failed every try of a task with
    ``stream_retry="dead_letter"``: acknowledged (its message too), so the stream went on,
    and kept here with the error. Goes with its task instance."""

    __tablename__ = "dead_letter"
    __table_args__ = (
        Index("ix_dead_letter_dag_id_id", "dag_id", "id"),
        # The triggerer looks up which messages it acknowledges are dead letters.
        Index("ix_dead_letter_trigger_id_dedup_key", "trigger_id", "dedup_key"),
    )

    id: Col[int] = Column(Integer, primary_key=True, autoincrement=True)
    task_instance_id: Col[int] = Column(
        ForeignKey("task_instance.id", ondelete="CASCADE"), index=True, nullable=False
    )
    dag_id: Col[str] = Column(String(ID_LEN), nullable=False)
    run_id: Col[str] = Column(String(ID_LEN), nullable=False)
    task_id: Col[str] = Column(String(ID_LEN), nullable=False)
    map_index: Col[int] = Column(Integer, nullable=False)
    # The try whose failure sent it here.
    try_number: Col[int] = Column(Integer, nullable=False)
    trigger_id: Col[int] = Column(Integer, nullable=False)
    sequence_index: Col[int] = Column(BigInteger, nullable=False)
    # The message's id at its broker (the event's dedup_key), where it has one.
    dedup_key: Col[str | None] = Column(String(512))
    payload: Col[str] = Column(Text, nullable=False)  # JSON text, as the event held it
    reason: Col[str] = Column(Text, nullable=False)
    created_at: Col[datetime] = Column(UTCDateTime, nullable=False)


class TaskInstanceHistory(Base):
    """One row per finished try of a task instance."""

    __tablename__ = "task_instance_history"
    __table_args__ = (UniqueConstraint("task_instance_id", "try_number"),)

    id: Col[int] = Column(Integer, primary_key=True, autoincrement=True)
    task_instance_id: Col[int] = Column(
        ForeignKey("task_instance.id", ondelete="CASCADE"), nullable=False
    )
    try_number: Col[int] = Column(Integer, nullable=False)
    state: Col[str] = Column(String(20), nullable=False)
    start_date: Col[datetime | None] = Column(UTCDateTime)
    end_date: Col[datetime | None] = Column(UTCDateTime)
    duration: Col[float | None] = Column(Float)
    hostname: Col[str | None] = Column(String(ID_LEN))
    error: Col[str | None] = Column(Text)


class XCom(Base):
    __tablename__ = "xcom"
    __table_args__ = (UniqueConstraint("dag_run_id", "task_id", "map_index", "key"),)

    id: Col[int] = Column(Integer, primary_key=True, autoincrement=True)
    dag_run_id: Col[int] = Column(ForeignKey("dag_run.id", ondelete="CASCADE"), nullable=False)
    task_id: Col[str] = Column(String(ID_LEN), nullable=False)
    map_index: Col[int] = Column(Integer, default=-1, nullable=False)
    key: Col[str] = Column(String(512), nullable=False)
    value: Col[str] = Column(Text, nullable=False)  # JSON text
    # For list values: their length, so the scheduler can expand without decoding.
    length: Col[int | None] = Column(Integer)
    created_at: Col[datetime] = Column(UTCDateTime, nullable=False)


class RenderedTaskInstanceFields(Base):
    """A try's templated fields as rendered (Airflow's ``rendered_task_instance_fields``),
    reported by the worker with the try's result."""

    __tablename__ = "rendered_task_instance_fields"

    task_instance_id: Col[int] = Column(
        ForeignKey("task_instance.id", ondelete="CASCADE"), primary_key=True
    )
    try_number: Col[int] = Column(Integer, primary_key=True)
    # {field: the rendered value's text}, masked and cut like Airflow's.
    rendered_fields: Col[dict[str, str]] = Column(JSON, nullable=False)
    created_at: Col[datetime] = Column(UTCDateTime, nullable=False)


class Trigger(Base):
    __tablename__ = "trigger"

    id: Col[int] = Column(Integer, primary_key=True, autoincrement=True)
    classpath: Col[str] = Column(String(1000), nullable=False)
    kwargs: Col[dict[str, Any]] = Column(JSON, nullable=False)
    created_at: Col[datetime] = Column(UTCDateTime, nullable=False)
    # The current run of this trigger; a fresh run gets a new id and restarts the sequence.
    trigger_run_id: Col[str | None] = Column(String(64))
    # W3C trace context of the span that deferred (tracing on): its trigger runs' parent.
    traceparent: Col[str | None] = Column(String(64))
    # Lease: the triggerer (job) holding it, valid while that job heartbeats — one row to
    # renew however many triggers it runs — and a fencing epoch bumped on each claim.
    triggerer_job_id: Col[int | None] = Column(
        ForeignKey("job.id", ondelete="SET NULL"), index=True
    )
    lease_epoch: Col[int] = Column(Integer, default=0, nullable=False)
    # How its task consumes events: "classic" (the resume method, once per event, in
    # order), "batch" (handle_trigger_events) or "direct" (payloads straight into the
    # task's output stream). And how far the trigger may run ahead of that consumer.
    consumer: Col[str] = Column(String(20), default="classic", nullable=False)
    max_pending_events: Col[int | None] = Column(Integer)
    # What its task's deferral timeout does: "failed", "failed_no_retry" or "skipped".
    timeout_outcome: Col[str] = Column(String(20), default="failed", nullable=False)
    checkpoint: Col[Any | None] = Column(JSON)
    next_sequence: Col[int] = Column(BigInteger, default=0, nullable=False)
    acked_sequence: Col[int] = Column(BigInteger, default=-1, nullable=False)
    # Events up to here were deleted once acknowledged: one re-yielded after a failover is
    # dropped, as the unique key drops one still stored.
    pruned_sequence: Col[int] = Column(BigInteger, default=-1, server_default="-1", nullable=False)
    completed: Col[bool] = Column(Boolean, default=False, nullable=False)
    # The redelivery window's clock (ADR 0032): the acknowledgement as it stood at
    # ``dedup_mark_at``; once the window has passed since, the dedup records at or below
    # it go, and the mark moves on.
    dedup_mark_sequence: Col[int | None] = Column(BigInteger)
    dedup_mark_at: Col[datetime | None] = Column(UTCDateTime)


class TriggerEvent(Base):
    __tablename__ = "trigger_event"
    __table_args__ = (UniqueConstraint("trigger_id", "sequence_index"),)

    id: Col[int] = Column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    trigger_id: Col[int] = Column(ForeignKey("trigger.id", ondelete="CASCADE"), nullable=False)
    trigger_run_id: Col[str] = Column(String(64), nullable=False)
    sequence_index: Col[int] = Column(BigInteger, nullable=False)
    payload: Col[str] = Column(Text, nullable=False)  # JSON text
    is_last: Col[bool] = Column(Boolean, default=False, nullable=False)
    checkpoint: Col[Any | None] = Column(JSON)
    created_at: Col[datetime] = Column(UTCDateTime, nullable=False)
    # The source's own id of what the event carries (a broker's message id); a
    # redelivery is recognised by its TriggerDedup record, which outlives the event.
    dedup_key: Col[str | None] = Column(String(512))


class TriggerDedup(Base):
    """A message a trigger stored an event for, by its source's id (ADR 0032): a broker
    redelivering it within the redelivery window is recognised though the event itself
    was consumed and pruned."""

    __tablename__ = "trigger_dedup"
    __table_args__ = (
        Index("uq_trigger_dedup_trigger_id_dedup_key", "trigger_id", "dedup_key", unique=True),
    )

    trigger_id: Col[int] = Column(ForeignKey("trigger.id", ondelete="CASCADE"), primary_key=True)
    # The event's: a redelivery is acknowledged to its source once this one is.
    sequence_index: Col[int] = Column(BigInteger, primary_key=True)
    dedup_key: Col[str] = Column(String(512), nullable=False)
    committed_at: Col[datetime] = Column(UTCDateTime, nullable=False)


class TaskTimeline(Base):
    """A task instance's state changes (and the batches of trigger events handed to it),
    each with its time and try: what the run timeline draws segments from."""

    __tablename__ = "task_timeline"

    id: Col[int] = Column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    task_instance_id: Col[int] = Column(
        ForeignKey("task_instance.id", ondelete="CASCADE"), index=True, nullable=False
    )
    dag_run_id: Col[int] = Column(
        ForeignKey("dag_run.id", ondelete="CASCADE"), index=True, nullable=False
    )
    try_number: Col[int] = Column(Integer, nullable=False)
    # queue, start, defer, resume, finish, … (transitions' kinds), or "events".
    kind: Col[str] = Column(String(20), nullable=False)
    state: Col[str | None] = Column(String(20))
    at: Col[datetime] = Column(UTCDateTime, nullable=False)
    detail: Col[dict[str, Any] | None] = Column(JSON)


class Stream(Base):
    """Header of a task's output stream: items live in ``stream_item``."""

    __tablename__ = "stream"
    __table_args__ = (UniqueConstraint("task_instance_id", "key"),)

    id: Col[int] = Column(Integer, primary_key=True, autoincrement=True)
    task_instance_id: Col[int] = Column(
        ForeignKey("task_instance.id", ondelete="CASCADE"), nullable=False
    )
    key: Col[str] = Column(String(512), default="return_value", nullable=False)
    closed: Col[bool] = Column(Boolean, default=False, nullable=False)
    length: Col[int] = Column(BigInteger, default=0, nullable=False)
    acknowledged: Col[int] = Column(BigInteger, default=-1, nullable=False)
    created_at: Col[datetime] = Column(UTCDateTime, nullable=False)
    closed_at: Col[datetime | None] = Column(UTCDateTime)
    # When retention (or `db clean`) removed the items; the header stays to say so.
    items_removed_at: Col[datetime | None] = Column(UTCDateTime)


class StreamItem(Base):
    __tablename__ = "stream_item"

    stream_id: Col[int] = Column(ForeignKey("stream.id", ondelete="CASCADE"), primary_key=True)
    index: Col[int] = Column(BigInteger, primary_key=True)
    value: Col[str] = Column(Text, nullable=False)  # JSON text


class ImportError_(Base):
    __tablename__ = "import_error"

    id: Col[int] = Column(Integer, primary_key=True, autoincrement=True)
    filename: Col[str] = Column(Text, unique=True, nullable=False)
    dag_id: Col[str | None] = Column(String(ID_LEN))
    task_id: Col[str | None] = Column(String(ID_LEN))
    line: Col[int | None] = Column(Integer)
    message: Col[str] = Column(Text, nullable=False)
    stacktrace: Col[str] = Column(Text, nullable=False)
    timestamp: Col[datetime] = Column(UTCDateTime, nullable=False)


class Job(Base):
    """A running component (scheduler, triggerer, worker pool) and its heartbeat."""

    __tablename__ = "job"

    id: Col[int] = Column(Integer, primary_key=True, autoincrement=True)
    job_type: Col[str] = Column(String(30), nullable=False)
    hostname: Col[str] = Column(String(ID_LEN), nullable=False)
    pid: Col[int] = Column(Integer, nullable=False)
    state: Col[str] = Column(String(20), nullable=False)
    start_date: Col[datetime] = Column(UTCDateTime, nullable=False)
    latest_heartbeat: Col[datetime] = Column(UTCDateTime, nullable=False)


class Connection(Base):
    __tablename__ = "connection"

    id: Col[int] = Column(Integer, primary_key=True, autoincrement=True)
    conn_id: Col[str] = Column(String(ID_LEN), unique=True, nullable=False)
    # Fernet-encrypted when is_encrypted (rows from before 0004 are plain text).
    uri: Col[str] = Column(Text, nullable=False)
    description: Col[str | None] = Column(Text)
    is_encrypted: Col[bool] = Column(Boolean, default=False, server_default=false(), nullable=False)


class Variable(Base):
    __tablename__ = "variable"

    id: Col[int] = Column(Integer, primary_key=True, autoincrement=True)
    key: Col[str] = Column(String(ID_LEN), unique=True, nullable=False)
    # Fernet-encrypted, as connections' URIs.
    val: Col[str] = Column(Text, nullable=False)
    description: Col[str | None] = Column(Text)
    is_encrypted: Col[bool] = Column(Boolean, default=False, server_default=false(), nullable=False)


class User(Base):
    __tablename__ = "user"

    id: Col[int] = Column(Integer, primary_key=True, autoincrement=True)
    username: Col[str] = Column(String(ID_LEN), unique=True, nullable=False)
    password_hash: Col[str] = Column(String(512), nullable=False)
    role: Col[str] = Column(String(20), nullable=False)  # admin | viewer
    created_at: Col[datetime] = Column(UTCDateTime, nullable=False)


class ApiToken(Base):
    __tablename__ = "api_token"

    id: Col[int] = Column(Integer, primary_key=True, autoincrement=True)
    user_id: Col[int] = Column(ForeignKey("user.id", ondelete="CASCADE"), nullable=False)
    token_hash: Col[str] = Column(String(128), unique=True, nullable=False)
    created_at: Col[datetime] = Column(UTCDateTime, nullable=False)
    expires_at: Col[datetime | None] = Column(UTCDateTime)


# -- assets (Airflow 3's data-aware scheduling) ------------------------------------------

ASSET_KEY_LEN = 1500  # Airflow's limit on an asset's name and URI


class Asset(Base):
    """An asset some DAG names (or an external event created); never deleted by a parse,
    so its events outlive the DAG that defined it."""

    __tablename__ = "asset"

    id: Col[int] = Column(Integer, primary_key=True, autoincrement=True)
    name: Col[str] = Column(String(ASSET_KEY_LEN), unique=True, nullable=False)
    uri: Col[str] = Column(String(ASSET_KEY_LEN), unique=True, nullable=False)
    group: Col[str] = Column(String(ID_LEN), default="asset", nullable=False)
    extra: Col[dict[str, Any]] = Column(JSON, default=dict, nullable=False)
    created_at: Col[datetime] = Column(UTCDateTime, nullable=False)
    updated_at: Col[datetime] = Column(UTCDateTime, nullable=False)


class AssetAlias(Base):
    __tablename__ = "asset_alias"

    id: Col[int] = Column(Integer, primary_key=True, autoincrement=True)
    name: Col[str] = Column(String(ASSET_KEY_LEN), unique=True, nullable=False)
    group: Col[str] = Column(String(ID_LEN), default="asset", nullable=False)


class AssetAliasAsset(Base):
    """The assets an alias has resolved to (a task emitted their events through it)."""

    __tablename__ = "asset_alias_asset"

    alias_id: Col[int] = Column(ForeignKey("asset_alias.id", ondelete="CASCADE"), primary_key=True)
    asset_id: Col[int] = Column(
        ForeignKey("asset.id", ondelete="CASCADE"), primary_key=True, index=True
    )


class AssetEvent(Base):
    """One update of an asset: by a task that succeeded, a watcher, or the REST API."""

    __tablename__ = "asset_event"
    __table_args__ = (Index("ix_asset_event_asset_id_id", "asset_id", "id"),)

    id: Col[int] = Column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    asset_id: Col[int] = Column(ForeignKey("asset.id", ondelete="CASCADE"), nullable=False)
    extra: Col[dict[str, Any]] = Column(JSON, default=dict, nullable=False)
    timestamp: Col[datetime] = Column(UTCDateTime, nullable=False)
    source_dag_id: Col[str | None] = Column(String(ID_LEN))
    source_task_id: Col[str | None] = Column(String(ID_LEN))
    source_run_id: Col[str | None] = Column(String(ID_LEN))
    source_map_index: Col[int] = Column(Integer, default=-1, nullable=False)
    source_alias_name: Col[str | None] = Column(String(ASSET_KEY_LEN))
    # A watcher's event: its trigger. The API's: "api".
    source_trigger_id: Col[int | None] = Column(
        ForeignKey("trigger.id", ondelete="SET NULL"), index=True
    )
    # Where the event came from, once: a broker's message id, a client's idempotency key.
    dedup_key: Col[str | None] = Column(String(512), unique=True)


class AssetDagRunQueue(Base):
    """Events a DAG scheduled on assets has not run for yet (Airflow's ``asset_dag_run_queue``,
    by event rather than by asset so each run links exactly the events that started it)."""

    __tablename__ = "asset_dag_run_queue"

    event_id: Col[int] = Column(ForeignKey("asset_event.id", ondelete="CASCADE"), primary_key=True)
    target_dag_id: Col[str] = Column(
        ForeignKey("dag.dag_id", ondelete="CASCADE"), primary_key=True, index=True
    )
    asset_id: Col[int] = Column(ForeignKey("asset.id", ondelete="CASCADE"), nullable=False)
    created_at: Col[datetime] = Column(UTCDateTime, nullable=False)


class DagRunAssetEvent(Base):
    """The events that started an asset-triggered run."""

    __tablename__ = "dag_run_asset_event"

    dag_run_id: Col[int] = Column(ForeignKey("dag_run.id", ondelete="CASCADE"), primary_key=True)
    event_id: Col[int] = Column(
        ForeignKey("asset_event.id", ondelete="CASCADE"), primary_key=True, index=True
    )


class AssetReference(Base):
    """Which DAG names which asset or alias, and how: "schedule", "outlet" or "inlet"
    (with the task). Rewritten each time the DAG gets a new version."""

    __tablename__ = "asset_reference"

    id: Col[int] = Column(Integer, primary_key=True, autoincrement=True)
    dag_id: Col[str] = Column(
        ForeignKey("dag.dag_id", ondelete="CASCADE"), index=True, nullable=False
    )
    kind: Col[str] = Column(String(20), nullable=False)
    task_id: Col[str | None] = Column(String(ID_LEN))
    asset_id: Col[int | None] = Column(ForeignKey("asset.id", ondelete="CASCADE"), index=True)
    alias_id: Col[int | None] = Column(ForeignKey("asset_alias.id", ondelete="CASCADE"), index=True)


class AssetWatcher(Base):
    """A watcher of an asset and the trigger it runs; watchers with the same trigger
    (class and arguments) share its row, so one trigger run serves them all."""

    __tablename__ = "asset_watcher"

    asset_id: Col[int] = Column(ForeignKey("asset.id", ondelete="CASCADE"), primary_key=True)
    name: Col[str] = Column(String(ID_LEN), primary_key=True)
    trigger_id: Col[int] = Column(
        ForeignKey("trigger.id", ondelete="CASCADE"), index=True, nullable=False
    )
    # The DAG whose file defines it: a trigger class defined there is loaded from it.
    dag_id: Col[str] = Column(ForeignKey("dag.dag_id", ondelete="CASCADE"), nullable=False)
