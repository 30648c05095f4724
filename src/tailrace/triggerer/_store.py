"""The triggerer's database side: leases, claims, fenced event writes, acknowledgements.

Each method takes a Connection inside a transaction the caller opened, and is short: it
never awaits, never runs user code. The asyncio runner calls them on its database thread.
A trigger is leased to a triggerer's job while that job heartbeats (one row renews every
lease); each claim bumps the trigger's ``lease_epoch``, and an event is stored only with
the epoch and job that claimed it, so a triggerer that lost a trigger cannot add to it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, bindparam, case, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert

from tailrace import jobs
from tailrace.db.errors import NaiveDatetimeError
from tailrace.db.models import (
    AssetWatcher,
    Dag,
    DagRun,
    DagVersion,
    Deadline,
    Job,
    TaskInstance,
    Trigger,
    TriggerDedup,
    TriggerEvent,
)
from tailrace.sdk.triggers import task_end_of
from tailrace.serialization import dumps, loads
from tailrace.state import TaskInstanceState as TIS
from tailrace.store import deadlines
from tailrace.store.assets import WATCHER_CONSUMER, record_watcher_events


@dataclass(slots=True)
class Envelope:
    """One event on its way to the database, with what fences it."""

    trigger_id: int
    epoch: int
    trigger_run_id: str
    sequence_index: int
    payload: str  # JSON text
    is_last: bool
    checkpoint: Any
    created_at: datetime
    # The run ended after sequence_index - 1 (no event of its own): mark that one last.
    closes: bool = False
    # The consuming task's (dag_id, task_id), the labels of its stream's metrics.
    stream: tuple[str, str] = ("", "")
    # The source's id of the message the event carries: a redelivery is stored once.
    dedup_key: str | None = None
    # Its row as SQLite stores it, made by ``prepare`` before the write's transaction.
    sqlite_row: tuple[Any, ...] | None = None


@dataclass(slots=True)
class Written:
    """What a batch write did."""

    accepted: int = 0
    # (trigger id, sequence index) of a redelivered message, not stored again -> the
    # sequence index it is stored under (it is acknowledged to its source with that one).
    duplicates: dict[tuple[int, int], int] = field(default_factory=dict)
    # Triggers of asset watchers whose events became asset events in this transaction.
    watchers: set[int] = field(default_factory=set)
    asset_events: int = 0


@dataclass(frozen=True, slots=True)
class DeferredTask:
    """The task instance a trigger serves: for its log file and for people."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    try_number: int
    # Whether its DAG was paused when the trigger was claimed (a pause after that ends a
    # queue stream: BaseTrigger.stop_gracefully).
    dag_paused: bool = False


@dataclass(frozen=True, slots=True)
class Claim:
    """A trigger this triggerer has just leased, and where its run resumes."""

    trigger_id: int
    classpath: str
    kwargs: dict[str, Any]
    epoch: int
    trigger_run_id: str
    consumer: str
    max_pending: int | None
    acked: int
    # The last durable checkpoint and the sequence index of the event that carried it.
    checkpoint: Any
    checkpoint_sequence: int | None
    task: DeferredTask | None
    # Past the highest index stored: the index its last event takes, however few events
    # it yields again (one yielded again takes its old index, and is dropped).
    stored_up_to: int = 0
    # The span that deferred (tracing on): the trigger run's parent.
    traceparent: str | None = None
    # The DAG file its trigger class may be defined in (and a deadline callback's
    # callable): its task instance's run's, an asset watcher's DAG's, a deadline's run's.
    fileloc: str | None = None

    @property
    def resume_at(self) -> int:
        """The first sequence index the run yields (again): right after the checkpoint."""
        return resume_index(self.checkpoint_sequence)


def resume_index(checkpoint_sequence: int | None) -> int:
    """Where a run started again yields from: right after its checkpoint's event, else
    from the start (the events it yields again carry indexes already stored)."""
    return 0 if checkpoint_sequence is None else checkpoint_sequence + 1


@dataclass(frozen=True, slots=True)
class Sync:
    lost: list[int]  # triggers we ran that another triggerer (or a cancel) took away
    claims: list[Claim]
    # Of the stoppable triggers asked about: whether their task's DAG is paused.
    paused: dict[int, bool] = field(default_factory=dict)


class TriggerStore:
    """The SQL of one triggerer: its job row, its leases, and the events it writes."""

    def __init__(
        self,
        *,
        lease_seconds: float,
        clock: Callable[[], datetime],
        only_runs: Collection[int] | None = None,
    ) -> None:
        self.lease_seconds = lease_seconds
        self.clock = clock
        # `dags test`: claim only the triggers of these runs' task instances.
        self.only_runs = list(only_runs) if only_runs is not None else None
        self.job_id = 0

    def register(self, conn: Connection) -> int:
        self.job_id = jobs.register(conn, "triggerer", self.clock())
        return self.job_id

    def release_all(self, conn: Connection) -> None:
        """Hand every trigger back at once instead of making others wait out the lease."""
        conn.execute(
            update(Trigger)
            .where(Trigger.triggerer_job_id == self.job_id)
            .values(triggerer_job_id=None)
        )
        jobs.finish(conn, self.job_id)

    def sync(
        self,
        conn: Connection,
        held: Collection[int] | None,
        free: int,
        stoppable: Collection[int] = (),
    ) -> Sync:
        """Heartbeat (renewing every lease at once), find which of ``held`` were lost and
        which of ``stoppable`` serve a paused DAG, claim up to ``free`` new triggers."""
        now = self.clock()
        jobs.heartbeat(conn, self.job_id, now)
        lost: list[int] = []
        if held:
            mine = set(
                conn.scalars(
                    select(Trigger.id).where(
                        Trigger.triggerer_job_id == self.job_id, Trigger.completed.is_(False)
                    )
                )
            )
            lost = [trigger_id for trigger_id in held if trigger_id not in mine]
        claims: list[Claim] = []
        if free > 0:
            candidates = conn.scalars(
                self._claimable(now)
                .order_by(Trigger.id)
                .limit(free)
                .with_for_update(skip_locked=True)
            ).all()
            if candidates:
                claims = self._claim(conn, list(candidates))
        paused: dict[int, bool] = {}
        if stoppable:
            paused = {
                trigger_id: bool(is_paused)
                for trigger_id, is_paused in conn.execute(
                    select(TaskInstance.trigger_id, Dag.is_paused)
                    .join(Dag, Dag.dag_id == TaskInstance.dag_id)
                    .where(TaskInstance.trigger_id.in_(list(stoppable)))
                )
                if trigger_id is not None
            }
        return Sync(lost=lost, claims=claims, paused=paused)

    def _claimable(self, now: datetime) -> Any:
        live = select(Job.id).where(
            Job.job_type == "triggerer",
            Job.state == "running",
            Job.latest_heartbeat > now - timedelta(seconds=self.lease_seconds),
        )
        claimable = select(Trigger.id).where(
            Trigger.completed.is_(False),
            or_(Trigger.triggerer_job_id.is_(None), Trigger.triggerer_job_id.not_in(live)),
        )
        if self.only_runs is not None:
            claimable = claimable.where(
                Trigger.id.in_(
                    select(TaskInstance.trigger_id).where(
                        TaskInstance.dag_run_id.in_(self.only_runs)
                    )
                )
                | Trigger.id.in_(
                    select(Deadline.trigger_id).where(Deadline.dag_run_id.in_(self.only_runs))
                )
            )
        return claimable

    def _claim(self, conn: Connection, ids: list[int]) -> list[Claim]:
        new_run = uuid.uuid4().hex
        for chunk in _chunks(ids):
            conn.execute(
                update(Trigger)
                .where(Trigger.id.in_(chunk))
                .values(triggerer_job_id=self.job_id, lease_epoch=Trigger.lease_epoch + 1)
            )
            conn.execute(
                update(Trigger)
                .where(Trigger.id.in_(chunk), Trigger.trigger_run_id.is_(None))
                .values(trigger_run_id=new_run)
            )
        return [claim for chunk in _chunks(ids) for claim in _describe_claims(conn, chunk)]

    def write_events(self, conn: Connection, batch: list[Envelope]) -> int:
        """Prepare and store the events whose lease still holds (as the runner does, in one
        call); returns how many were accepted."""
        self.prepare(conn.dialect.name, batch)
        return self.write(conn, batch).accepted

    @staticmethod
    def prepare(dialect: str, batch: list[Envelope]) -> None:
        """What needs no lock, done before the write's transaction begins: on SQLite,
        whose one write lock the transaction holds throughout, each event's row (its
        time's text alone was a third of a batch's time under the lock). The insert makes
        a run's last event's row again: the write may make an event the last."""
        if dialect == "sqlite":
            for e in batch:
                if not e.closes:
                    e.sqlite_row = _sqlite_row(e)

    def write(self, conn: Connection, batch: list[Envelope]) -> Written:
        """Store the events whose lease still holds, dropping redelivered messages; an
        asset watcher's events become asset events in this same transaction."""
        ids = sorted({e.trigger_id for e in batch})
        # (trigger, epoch) pairs whose lease still holds: ours, current, not completed.
        rows = [
            r
            for chunk in _chunks(ids)
            for r in conn.execute(
                # Locked: a claim cannot bump the epoch, nor pruning move its watermark,
                # between this check and the insert.
                select(Trigger.id, Trigger.lease_epoch, Trigger.pruned_sequence, Trigger.consumer)
                .where(
                    Trigger.id.in_(chunk),
                    Trigger.triggerer_job_id == self.job_id,
                    Trigger.completed.is_(False),
                )
                .with_for_update()
            )
        ]
        leased = {(r.id, r.lease_epoch): r.pruned_sequence for r in rows}
        watchers = {r.id for r in rows if r.consumer == WATCHER_CONSUMER}
        fenced = [e for e in batch if (e.trigger_id, e.epoch) in leased]
        result = Written(accepted=len(fenced))
        if any(e.dedup_key is not None for e in fenced):
            fenced = _drop_duplicates(conn, fenced, result.duplicates)
        closes = [e for e in fenced if e.closes]
        # An event re-yielded after a failover whose first copy was consumed and pruned:
        # stored once already, so dropped (the unique key drops those still stored).
        valid = [
            e for e in fenced if not e.closes and e.sequence_index > leased[(e.trigger_id, e.epoch)]
        ]
        in_batch = {(e.trigger_id, e.sequence_index): e for e in valid} if closes else {}
        late_closes = []
        for close in closes:
            # The generator ended: its final event becomes the run's last. Usually that
            # event is in this very batch (a trigger that yields once and returns), and
            # it is simply written with is_last; otherwise it is marked in place.
            final = in_batch.get((close.trigger_id, close.sequence_index - 1))
            if final is not None:
                final.is_last = True
            else:
                late_closes.append(close)
        if valid:
            _insert_events(conn, valid)
        if late_closes:
            conn.execute(
                update(TriggerEvent)
                .where(
                    TriggerEvent.trigger_id == bindparam("b_id"),
                    TriggerEvent.sequence_index == bindparam("b_seq"),
                )
                .values(is_last=True),
                [{"b_id": e.trigger_id, "b_seq": e.sequence_index - 1} for e in late_closes],
            )
            conn.execute(
                update(Trigger).where(Trigger.id == bindparam("b_id")).values(completed=True),
                [{"b_id": e.trigger_id} for e in late_closes],
            )
        watched = [e for e in valid if e.trigger_id in watchers and not e.closes]
        if watched:
            self._to_asset_events(conn, watched, result)
        callbacks = {r.id for r in rows if r.consumer == deadlines.DEADLINE_CONSUMER}
        ended = [e for e in valid if e.trigger_id in callbacks]
        if ended:
            _end_deadline_callbacks(conn, ended)
        return result

    def _to_asset_events(self, conn: Connection, watched: list[Envelope], result: Written) -> None:
        """A watcher's events are asset events, durable with them: acknowledged at once."""
        result.asset_events = len(
            record_watcher_events(
                conn,
                [(e.trigger_id, e.sequence_index, e.payload, e.dedup_key) for e in watched],
                self.clock(),
            )
        )
        last: dict[int, int] = {}
        for e in watched:
            last[e.trigger_id] = max(last.get(e.trigger_id, -1), e.sequence_index)
        conn.execute(
            update(Trigger)
            .where(Trigger.id == bindparam("b_id"), Trigger.acked_sequence < bindparam("b_seq"))
            .values(acked_sequence=bindparam("b_seq")),
            [{"b_id": t, "b_seq": seq} for t, seq in last.items()],
        )
        result.watchers |= set(last)


def _end_deadline_callbacks(conn: Connection, ended: list[Envelope]) -> None:
    """An AsyncCallback's one event says how it ended (ADR 0037): written on its deadline
    with the event, and acknowledged (nobody else reads it)."""
    outcomes = []
    for e in ended:
        end = task_end_of(loads(e.payload))
        ok = end is not None and end[0] == "success"
        error = None if ok else str((end or ("", {}))[1].get("error") or e.payload)
        outcomes.append((e.trigger_id, ok, error))
    deadlines.record_async_outcomes(conn, outcomes)
    conn.execute(
        update(Trigger)
        .where(Trigger.id == bindparam("b_id"), Trigger.acked_sequence < bindparam("b_seq"))
        .values(acked_sequence=bindparam("b_seq")),
        [{"b_id": e.trigger_id, "b_seq": e.sequence_index} for e in ended],
    )


def _drop_duplicates(
    conn: Connection, batch: list[Envelope], duplicates: dict[tuple[int, int], int]
) -> list[Envelope]:
    """``batch`` without the messages stored before (their dedup records outlive their
    events by the redelivery window, ADR 0032), or earlier in it: each dropped event's
    (trigger, sequence) maps in ``duplicates`` to the sequence its message is stored
    under."""
    stored: dict[tuple[int, str], int] = {}
    by_trigger: dict[int, list[str]] = {}
    for e in batch:
        if e.dedup_key is not None:
            by_trigger.setdefault(e.trigger_id, []).append(e.dedup_key)
    for trigger_id, keys in by_trigger.items():
        for i in range(0, len(keys), 2000):
            for found, seq in conn.execute(
                select(TriggerDedup.dedup_key, TriggerDedup.sequence_index).where(
                    TriggerDedup.trigger_id == trigger_id,
                    TriggerDedup.dedup_key.in_(keys[i : i + 2000]),
                )
            ):
                stored[(trigger_id, str(found))] = seq
    kept = []
    for e in batch:
        if e.dedup_key is not None:
            pair = (e.trigger_id, e.dedup_key)
            if pair in stored:
                duplicates[(e.trigger_id, e.sequence_index)] = stored[pair]
                continue
            stored[pair] = e.sequence_index
        kept.append(e)
    return kept


def acked_sequences(conn: Connection, trigger_ids: Sequence[int]) -> dict[int, int]:
    """The highest sequence index each trigger's consumer has acknowledged."""
    return {
        trigger_id: acked
        for chunk in _chunks(trigger_ids)
        for trigger_id, acked in conn.execute(
            select(Trigger.id, Trigger.acked_sequence).where(Trigger.id.in_(chunk))
        )
    }


def _describe_claims(conn: Connection, ids: Sequence[int]) -> list[Claim]:
    # The DAG file the trigger class (or a deadline's callback) may be defined in: its
    # task instance's, whatever that instance's state (a batch consumer runs its batch on
    # a worker while its trigger goes on), an asset watcher's, or a deadline's. The task
    # a claim names is the one deferred on the trigger now.
    tasks: dict[int, DeferredTask] = {}
    dag_files: dict[int | None, str] = {}
    for r in conn.execute(
        select(
            TaskInstance.trigger_id,
            TaskInstance.state,
            TaskInstance.dag_id,
            TaskInstance.run_id,
            TaskInstance.task_id,
            TaskInstance.map_index,
            TaskInstance.try_number,
            DagVersion.fileloc,
            Dag.is_paused,
        )
        .join(DagRun, DagRun.id == TaskInstance.dag_run_id)
        .join(DagVersion, DagVersion.id == DagRun.dag_version_id)
        .outerjoin(Dag, Dag.dag_id == TaskInstance.dag_id)
        .where(TaskInstance.trigger_id.in_(ids))
    ):
        dag_files[r.trigger_id] = r.fileloc
        if r.state == TIS.DEFERRED:
            tasks[r.trigger_id] = DeferredTask(
                dag_id=r.dag_id,
                run_id=r.run_id,
                task_id=r.task_id,
                map_index=r.map_index,
                try_number=r.try_number,
                dag_paused=bool(r.is_paused),
            )
    dag_files.update(
        conn.execute(
            select(AssetWatcher.trigger_id, Dag.fileloc)
            .join(Dag, Dag.dag_id == AssetWatcher.dag_id)
            .where(AssetWatcher.trigger_id.in_(ids))
        ).all()
    )
    for trigger_id, fileloc in conn.execute(
        select(Deadline.trigger_id, DagVersion.fileloc)
        .join(DagRun, DagRun.id == Deadline.dag_run_id)
        .join(DagVersion, DagVersion.id == DagRun.dag_version_id)
        .where(Deadline.trigger_id.in_(ids))
    ):
        dag_files[trigger_id] = fileloc
    return [
        Claim(
            trigger_id=r.id,
            classpath=r.classpath,
            kwargs=r.kwargs,
            epoch=r.lease_epoch,
            trigger_run_id=r.trigger_run_id,
            consumer=r.consumer,
            max_pending=r.max_pending_events,
            acked=r.acked_sequence,
            checkpoint=r.checkpoint["value"] if r.checkpoint else None,
            checkpoint_sequence=r.checkpoint["seq"] if r.checkpoint else None,
            task=tasks.get(r.id),
            stored_up_to=r.next_sequence,
            traceparent=r.traceparent,
            fileloc=dag_files.get(r.id),
        )
        for r in conn.execute(
            select(
                Trigger.id,
                Trigger.classpath,
                Trigger.kwargs,
                Trigger.lease_epoch,
                Trigger.trigger_run_id,
                Trigger.traceparent,
                Trigger.consumer,
                Trigger.max_pending_events,
                Trigger.acked_sequence,
                Trigger.checkpoint,
                Trigger.next_sequence,
            )
            .where(Trigger.id.in_(ids))
            .order_by(Trigger.id)
        )
    ]


def _insert_events(conn: Connection, valid: list[Envelope]) -> None:
    # A run resumed from a checkpoint yields some events again: their sequence numbers
    # are taken already, and the unique key drops them — each event is stored once.
    if conn.dialect.name == "sqlite":
        # SQLite has one writer at a time, and this is its hottest write: the rows go to
        # the driver as tuples already in their stored form, without SQLAlchemy's
        # per-row bind processing (three quarters of the time otherwise).
        conn.exec_driver_sql(
            _SQLITE_INSERT_EVENTS,
            [
                e.sqlite_row if e.sqlite_row is not None and not e.is_last else _sqlite_row(e)
                for e in valid
            ],
        )
    else:
        conn.execute(
            pg_insert(TriggerEvent).on_conflict_do_nothing(
                index_elements=["trigger_id", "sequence_index"]
            ),
            [
                {
                    "trigger_id": e.trigger_id,
                    "trigger_run_id": e.trigger_run_id,
                    "sequence_index": e.sequence_index,
                    "payload": e.payload,
                    "is_last": e.is_last,
                    "checkpoint": e.checkpoint,
                    "created_at": e.created_at,
                    "dedup_key": e.dedup_key,
                }
                for e in valid
            ],
        )
    _insert_dedup_records(conn, [e for e in valid if e.dedup_key is not None])
    last: dict[int, Envelope] = {}
    checkpoints: dict[int, Envelope] = {}
    for e in valid:
        last[e.trigger_id] = e
        if e.checkpoint is not None:
            checkpoints[e.trigger_id] = e
    conn.execute(
        update(Trigger)
        .where(Trigger.id == bindparam("b_id"))
        .values(
            next_sequence=case(
                (Trigger.next_sequence > bindparam("b_next"), Trigger.next_sequence),
                else_=bindparam("b_next"),
            ),
            completed=bindparam("b_done"),
        ),
        [
            {"b_id": e.trigger_id, "b_next": e.sequence_index + 1, "b_done": e.is_last}
            for e in last.values()
        ],
    )
    if checkpoints:
        # Where a resumed run starts: the checkpoint and the event that carried it.
        conn.execute(
            update(Trigger)
            .where(Trigger.id == bindparam("b_id"))
            .values(checkpoint=bindparam("b_checkpoint")),
            [
                {
                    "b_id": e.trigger_id,
                    "b_checkpoint": {"seq": e.sequence_index, "value": e.checkpoint},
                }
                for e in checkpoints.values()
            ],
        )


def _insert_dedup_records(conn: Connection, keyed: list[Envelope]) -> None:
    """Each message's record, committed with its event: a redelivery is recognised by it
    after the event is pruned. An event re-yielded after a failover at a sequence
    already recorded is recorded once (ON CONFLICT), as it is stored once."""
    if not keyed:
        return
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql(
            _SQLITE_INSERT_DEDUP,
            [
                (e.trigger_id, e.sequence_index, e.dedup_key, sqlite_utc_text(e.created_at))
                for e in keyed
            ],
        )
    else:
        conn.execute(
            pg_insert(TriggerDedup).on_conflict_do_nothing(),
            [
                {
                    "trigger_id": e.trigger_id,
                    "sequence_index": e.sequence_index,
                    "dedup_key": e.dedup_key,
                    "committed_at": e.created_at,
                }
                for e in keyed
            ],
        )


_SQLITE_INSERT_DEDUP = (
    "INSERT INTO trigger_dedup (trigger_id, sequence_index, dedup_key, committed_at) "
    "VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
_SQLITE_INSERT_EVENTS = (
    "INSERT INTO trigger_event (trigger_id, trigger_run_id, sequence_index, payload, is_last, "
    "checkpoint, created_at, dedup_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (trigger_id, sequence_index) DO NOTHING"
)
# The JSON column's text for None, as the engine's serializer writes it.
_JSON_NULL = dumps(None)


def _sqlite_row(e: Envelope) -> tuple[Any, ...]:
    """The values of ``_SQLITE_INSERT_EVENTS`` for ``e``, in their stored form."""
    return (
        e.trigger_id,
        e.trigger_run_id,
        e.sequence_index,
        e.payload,
        e.is_last,
        _JSON_NULL if e.checkpoint is None else dumps(e.checkpoint),
        sqlite_utc_text(e.created_at),
        e.dedup_key,
    )


# The last second formatted, "YYYY-MM-DD HH:MM:SS", by its fields: a flood's events share
# their second, and isoformat() of an aware datetime costs twice what the rest does.
_last_second: tuple[tuple[int, ...] | None, str] = (None, "")


def sqlite_utc_text(moment: datetime) -> str:
    """``moment`` as a UTCDateTime column stores it on SQLite: in UTC, without offset."""
    global _last_second
    if moment.tzinfo is not UTC:
        if moment.tzinfo is None or moment.utcoffset() is None:
            raise NaiveDatetimeError(moment.isoformat())
        moment = moment.astimezone(UTC)
    key = (moment.second, moment.minute, moment.hour, moment.day, moment.month, moment.year)
    last = _last_second
    if last[0] != key:
        last = _last_second = (key, moment.isoformat(" ", "seconds")[:-6])  # no "+00:00"
    return f"{last[1]}.{moment.microsecond:06d}"


def _chunks(ids: Sequence[int], size: int = 2000) -> Iterator[Sequence[int]]:
    for i in range(0, len(ids), size):
        yield ids[i : i + size]
