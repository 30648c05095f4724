"""The triggerer: one asyncio loop running many triggers, each leased from the database.

Claiming, lease renewal and event writes happen on one database thread, in short
transactions, so the loop never waits on the database. Events are written in batches and
fenced by the lease epoch: a triggerer that lost its lease cannot add events. After each
batch the scheduler is woken; after the scheduler creates or cancels triggers, so is
the triggerer. A slow poll (a third of the lease) renews leases and is the safety net.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import logging
import os
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, bindparam, case, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from tailrace import jobs
from tailrace.connections import DatabaseConnections
from tailrace.dagfiles import DAG_MODULE_PREFIX, DagFileCache, prepare_import_path
from tailrace.db.models import DagRun, DagVersion, Job, TaskInstance, Trigger, TriggerEvent
from tailrace.execution import log_path_for
from tailrace.sdk.connections import redact, set_connection_source
from tailrace.serialization import dumps
from tailrace.state import TaskInstanceState as TIS
from tailrace.tracebacks import user_traceback
from tailrace.triggerer._logs import TriggerLogRouter, current_log_path
from tailrace.triggerer._watchdog import LoopWatchdog

log = logging.getLogger(__name__)
trigger_log = logging.getLogger("tailrace.triggers.runtime")
T = TypeVar("T")


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class _Envelope:
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


@dataclass
class Running:
    """A trigger this triggerer runs: its lease epoch fences every write for it."""

    trigger_id: int
    epoch: int
    trigger_run_id: str
    next_sequence: int
    label: str  # the task it serves, for people
    log_path: str | None
    task: asyncio.Task[None] | None = None
    trigger: Any = None
    done: bool = False
    consumer: str = "classic"
    # Backpressure: the trigger may run at most max_pending events ahead of `acked`.
    max_pending: int | None = None
    acked: int = -1
    # Created when the trigger first pauses: most never do, and 100,000 idle Events cost.
    acks: asyncio.Event | None = None
    paused: bool = False


@dataclass
class _Claim:
    trigger_id: int
    classpath: str
    kwargs: dict[str, Any]
    epoch: int
    trigger_run_id: str
    next_sequence: int
    consumer: str = "classic"
    max_pending: int | None = None
    acked: int = -1
    checkpoint: Any = None
    ti: Any = None
    # The DAG file of the deferred task: a trigger class defined there is loaded from it.
    fileloc: str | None = None


@dataclass
class TriggererStats:
    claimed: int = 0
    events_written: int = 0
    batches: int = 0
    # Seconds from an event's creation to its commit, for the most recent events.
    lags: deque[float] = field(default_factory=lambda: deque(maxlen=200_000))


class Triggerer:
    def __init__(
        self,
        engine: Engine,
        *,
        log_folder: str,
        capacity: int = 1000,
        lease_seconds: float = 30.0,
        max_payload_bytes: int = 1 << 20,
        block_warning_seconds: float = 0.2,
        batch_size: int = 5000,
        clock: Callable[[], datetime] = utcnow,
        only_runs: Collection[int] | None = None,
    ) -> None:
        self.engine = engine
        # `dags test`: run only the triggers of these runs' task instances.
        self.only_runs = list(only_runs) if only_runs is not None else None
        self.log_folder = log_folder
        self.capacity = capacity
        self.lease_seconds = lease_seconds
        self.max_payload_bytes = max_payload_bytes
        self.block_warning_seconds = block_warning_seconds
        self.batch_size = batch_size
        # Unwritten events the loop may hold before producers wait for the writer.
        self.outbox_limit = 4 * batch_size
        self._outbox_room: asyncio.Event | None = None
        self.clock = clock
        # Unique, and telling people where it runs.
        self.name = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.running: dict[int, Running] = {}
        self.stats = TriggererStats()
        # Called with the ids of triggers whose new events are durable: wakes the scheduler.
        self.on_events: Callable[[set[int]], None] = lambda trigger_ids: None
        # Measurement hook: each durable batch's (trigger id, JSON payload) and commit time.
        self.on_durable: Callable[[list[tuple[int, str]], float], None] | None = None
        self._db = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="triggerer-db")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._stop: asyncio.Event | None = None
        self._outbox: asyncio.Queue[_Envelope] | None = None
        self.router = TriggerLogRouter()
        self._last_lost_check = 0.0
        self._background: set[asyncio.Future[None]] = set()
        self._dag_files = DagFileCache()
        self.job_id = 0

    # -- lifecycle ---------------------------------------------------------------------

    def wake(self) -> None:
        """Thread-safe: look for new or cancelled triggers now."""
        loop, event = self._loop, self._wake
        if loop is not None and event is not None:
            with contextlib.suppress(RuntimeError):  # loop already closed
                loop.call_soon_threadsafe(event.set)

    def stop(self) -> None:
        """Thread-safe: finish the current work, hand the triggers back, return from run()."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)

    def run_in_thread(self) -> threading.Thread:
        """Run on a new thread with its own event loop (uvloop when installed)."""
        started = threading.Event()

        def main() -> None:
            with asyncio.Runner(loop_factory=_loop_factory()) as runner:
                runner.run(self.run(started))

        thread = threading.Thread(target=main, name="triggerer", daemon=True)
        thread.start()
        started.wait(timeout=30)
        return thread

    async def run(self, started: threading.Event | None = None) -> None:
        prepare_import_path()  # trigger classpaths in modules beside the DAGs resolve
        self._loop = asyncio.get_running_loop()
        self._stop = stop = asyncio.Event()
        self._wake = asyncio.Event()
        self._outbox = asyncio.Queue()
        self._outbox_room = asyncio.Event()
        root = logging.getLogger()
        root.addHandler(self.router)
        # Triggers may read connections from the database directly (hooks in triggers).
        connection_source = set_connection_source(DatabaseConnections(self.engine))
        # Triggers' INFO lines must reach their tasks' logs; consoles filter by handler level.
        if root.getEffectiveLevel() > logging.INFO:
            root.setLevel(logging.INFO)
        self.job_id = await self._in_db(lambda c: jobs.register(c, "triggerer", self.clock()))
        watchdog = LoopWatchdog(self, self.block_warning_seconds)
        watchdog.start(self._loop)
        persister = asyncio.create_task(self._persist_forever(), name="triggerer-persist")
        if started is not None:
            started.set()
        try:
            while not stop.is_set():
                try:
                    await self._sync()
                except Exception:
                    log.exception("triggerer sync failed (is the database up?); retrying")
                self._wake.clear()
                waiters = [asyncio.create_task(self._wake.wait()), asyncio.create_task(stop.wait())]
                await asyncio.wait(
                    waiters, timeout=self.lease_seconds / 3, return_when=asyncio.FIRST_COMPLETED
                )
                for w in waiters:
                    w.cancel()
        finally:
            await self._shutdown(persister)
            watchdog.stop()
            root.removeHandler(self.router)
            set_connection_source(connection_source)
            self.router.close()
            self._db.shutdown(wait=True)

    async def _shutdown(self, persister: asyncio.Task[None]) -> None:
        tasks = [r.task for r in self.running.values() if r.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert self._outbox is not None
        with contextlib.suppress(TimeoutError):  # a database that is down loses nothing:
            await asyncio.wait_for(self._outbox.join(), 30)  # unwritten events are re-run
        persister.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await persister
        # Hand our triggers back at once instead of making others wait out the lease.
        await self._in_db(self._release_all)

    # -- the database thread -----------------------------------------------------------

    async def _in_db(self, fn: Callable[[Connection], T]) -> T:
        def transaction() -> T:
            with self.engine.begin() as conn:
                return fn(conn)

        assert self._loop is not None
        return await self._loop.run_in_executor(self._db, transaction)

    def _release_all(self, conn: Connection) -> None:
        conn.execute(
            update(Trigger)
            .where(Trigger.triggerer_job_id == self.job_id)
            .values(triggerer_job_id=None)
        )
        jobs.finish(conn, self.job_id)

    def _sync_db(
        self, conn: Connection, running: set[int] | None, free: int
    ) -> tuple[list[int], list[_Claim]]:
        """Heartbeat (renewing every lease at once), find lost triggers, claim new ones."""
        now = self.clock()
        jobs.heartbeat(conn, self.job_id, now)
        lost: list[int] = []
        if running:
            mine = set(
                conn.scalars(
                    select(Trigger.id).where(
                        Trigger.triggerer_job_id == self.job_id, Trigger.completed.is_(False)
                    )
                )
            )
            lost = [trigger_id for trigger_id in running if trigger_id not in mine]
        claims: list[_Claim] = []
        if free > 0:
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
                )
            candidates = conn.scalars(
                claimable.order_by(Trigger.id).limit(free).with_for_update(skip_locked=True)
            ).all()
            if candidates:
                claims = self._claim(conn, list(candidates))
        return lost, claims

    def _claim(self, conn: Connection, ids: list[int]) -> list[_Claim]:
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
        return [claim for chunk in _chunks(ids) for claim in self._describe_claims(conn, chunk)]

    def _describe_claims(self, conn: Connection, ids: Sequence[int]) -> list[_Claim]:
        tis = {
            r.trigger_id: r
            for r in conn.execute(
                select(
                    TaskInstance.trigger_id,
                    TaskInstance.dag_id,
                    TaskInstance.run_id,
                    TaskInstance.task_id,
                    TaskInstance.map_index,
                    TaskInstance.try_number,
                    DagVersion.fileloc,
                )
                .join(DagRun, DagRun.id == TaskInstance.dag_run_id)
                .join(DagVersion, DagVersion.id == DagRun.dag_version_id)
                .where(
                    TaskInstance.trigger_id.in_(ids),
                    TaskInstance.state == TIS.DEFERRED,
                )
            )
        }
        return [
            _Claim(
                trigger_id=r.id,
                classpath=r.classpath,
                kwargs=r.kwargs,
                epoch=r.lease_epoch,
                trigger_run_id=r.trigger_run_id,
                next_sequence=r.next_sequence,
                consumer=r.consumer,
                max_pending=r.max_pending_events,
                acked=r.acked_sequence,
                checkpoint=r.checkpoint,
                ti=tis.get(r.id),
                fileloc=tis[r.id].fileloc if r.id in tis else None,
            )
            for r in conn.execute(
                select(
                    Trigger.id,
                    Trigger.classpath,
                    Trigger.kwargs,
                    Trigger.lease_epoch,
                    Trigger.trigger_run_id,
                    Trigger.next_sequence,
                    Trigger.consumer,
                    Trigger.max_pending_events,
                    Trigger.acked_sequence,
                    Trigger.checkpoint,
                ).where(Trigger.id.in_(ids))
            )
        ]

    def _write_events(self, conn: Connection, batch: list[_Envelope]) -> int:
        ids = sorted({e.trigger_id for e in batch})
        current = {
            r.id: r
            for r in conn.execute(
                select(Trigger.id, Trigger.lease_epoch, Trigger.triggerer_job_id, Trigger.completed)
                .where(Trigger.id.in_(ids))
                .with_for_update()
            )
        }
        fenced = [
            e
            for e in batch
            if (row := current.get(e.trigger_id)) is not None
            and row.lease_epoch == e.epoch
            and row.triggerer_job_id == self.job_id
            and not row.completed
        ]
        valid = [e for e in fenced if not e.closes]
        in_batch = {(e.trigger_id, e.sequence_index): e for e in valid}
        late_closes = []
        for close in (e for e in fenced if e.closes):
            # The generator ended: its final event becomes the run's last. Usually that
            # event is in this very batch (a trigger that yields once and returns), and
            # it is simply written with is_last; otherwise it is marked in place.
            final = in_batch.get((close.trigger_id, close.sequence_index - 1))
            if final is not None:
                final.is_last = True
            else:
                late_closes.append(close)
        if valid:
            self._insert_events(conn, valid)
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
        return len(fenced)

    def _insert_events(self, conn: Connection, valid: list[_Envelope]) -> None:
        # A run resumed from a checkpoint yields some events again: their sequence numbers
        # are taken already, and the unique key drops them — each event is stored once.
        dialect_insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
        conn.execute(
            dialect_insert(TriggerEvent).on_conflict_do_nothing(
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
                }
                for e in valid
            ],
        )
        last: dict[int, _Envelope] = {}
        checkpoints: dict[int, _Envelope] = {}
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

    # -- the loop ----------------------------------------------------------------------

    async def _sync(self) -> None:
        # Finding lost triggers reads every trigger we hold: with many, at most once a second.
        check = len(self.running) < 1000 or time.monotonic() - self._last_lost_check > 1.0
        held = {t for t, r in self.running.items() if not r.done} if check else None
        if check:
            self._last_lost_check = time.monotonic()
        free = self.capacity - len(self.running)
        lost, claims = await self._in_db(lambda c: self._sync_db(c, held, free))
        for trigger_id in lost:
            running = self.running.get(trigger_id)
            if running is not None and running.task is not None:
                running.task.cancel()
        for claim in claims:
            self._start(claim)
        # Acks may have come from a scheduler in another process: backpressured triggers
        # look again on every sync.
        self._refresh_acks(None)

    def _start(self, claim: _Claim) -> None:
        ti = claim.ti
        if ti is not None:
            label = f"{ti.dag_id}.{ti.task_id}" + (f"[{ti.map_index}]" if ti.map_index >= 0 else "")
            label += f" (run {ti.run_id}, try {ti.try_number})"
            path: str | None = str(
                log_path_for(
                    self.log_folder, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number
                )
            )
        else:
            label, path = f"trigger {claim.trigger_id} (no deferred task)", None
        # A run taken over from a dead triggerer resumes after its last checkpoint (or
        # from the start); the events it repeats carry sequence numbers already stored.
        resume_at = claim.checkpoint["seq"] + 1 if claim.checkpoint else 0
        running = Running(
            trigger_id=claim.trigger_id,
            epoch=claim.epoch,
            trigger_run_id=claim.trigger_run_id,
            next_sequence=resume_at,
            label=label,
            log_path=path,
            consumer=claim.consumer,
            max_pending=claim.max_pending,
            acked=claim.acked,
        )
        self.running[claim.trigger_id] = running
        self.stats.claimed += 1
        context = _context_for(path)
        running.task = context.run(
            asyncio.create_task,
            self._run_trigger(
                running,
                claim.classpath,
                claim.kwargs,
                claim.fileloc,
                claim.checkpoint["value"] if claim.checkpoint else None,
            ),
            name=f"trigger-{claim.trigger_id}",
        )

    async def _run_trigger(
        self,
        running: Running,
        classpath: str,
        kwargs: dict[str, Any],
        fileloc: str | None,
        checkpoint: Any,
    ) -> None:
        from tailrace.sdk import TaskFailedEvent
        from tailrace.sdk.triggers import load_trigger

        generator = None
        try:
            module = classpath.rpartition(".")[0]
            if fileloc is not None and module.startswith(DAG_MODULE_PREFIX):
                # Defined in the DAG file itself: import that file (off the loop) first.
                await asyncio.to_thread(self._dag_files.get, fileloc)
            trigger = load_trigger(classpath, kwargs)
            trigger.checkpoint = checkpoint
            running.trigger = trigger
            # The runtime's own lines are for the task's log; without one they cost for nothing.
            chatty = running.log_path is not None
            if chatty:
                trigger_log.info(
                    "Trigger %s started in triggerer %s for %s", classpath, self.name, running.label
                )
            generator = trigger.run()
            produced = await self._pump(running, generator, chatty)
            if produced == 0 and running.consumer == "classic":
                self._emit(
                    running,
                    TaskFailedEvent(error=f"trigger {classpath} ended without yielding an event"),
                    is_last=True,
                )
            else:
                # The generator ended: its last event (if any) closes the run.
                if chatty and produced > 1:
                    trigger_log.info("Trigger finished after %d events", produced)
                self._close(running)
        except asyncio.CancelledError:
            trigger_log.info("Trigger %s cancelled", classpath)
            raise
        except Exception as exc:
            error = redact(user_traceback(exc))
            trigger_log.error("Trigger %s failed:\n%s", classpath, error.rstrip())
            self._emit(
                running,
                TaskFailedEvent(error=f"trigger {classpath} failed:\n{error}"),
                is_last=True,
            )
        finally:
            close = getattr(generator, "aclose", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()
            if running.trigger is not None:
                try:
                    await running.trigger.cleanup()
                except Exception:
                    trigger_log.exception("cleanup() of trigger %s failed", classpath)
            self.running.pop(running.trigger_id, None)
            self.router.close_file(running.log_path)

    async def _pump(self, running: Running, generator: Any, chatty: bool) -> int:
        """Pull events from the trigger as backpressure allows; returns how many."""
        from tailrace.sdk import TriggerEvent

        produced = 0
        while True:
            limit = running.max_pending
            if limit is not None and running.next_sequence - 1 - running.acked >= limit:
                await self._backpressure(running)
            room = self._outbox_room
            if room is not None and self._outbox and self._outbox.qsize() >= self.outbox_limit:
                # Events not yet written are held in memory: a flood waits for the writer.
                room.clear()
                await room.wait()
            try:
                item = await anext(generator)
            except StopAsyncIteration:
                return produced
            event = item if isinstance(item, TriggerEvent) else TriggerEvent(item)
            if chatty and produced < 3:
                trigger_log.info("Trigger fired: %.200r", event.payload)
            produced += 1
            self._emit(running, event, is_last=False)

    async def _backpressure(self, running: Running) -> None:
        """Wait while the trigger is max_pending events ahead of its consumer's acks."""
        limit = running.max_pending
        while limit is not None and running.next_sequence - 1 - running.acked >= limit:
            running.paused = True
            if running.acks is None:
                running.acks = asyncio.Event()
            running.acks.clear()
            await running.acks.wait()
        running.paused = False

    def acks_arrived(self, trigger_ids: set[int]) -> None:
        """Thread-safe: consumers acknowledged events of these triggers."""
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._refresh_acks, trigger_ids)

    def _refresh_acks(self, trigger_ids: set[int] | None) -> None:
        paused = [
            r
            for t, r in self.running.items()
            if r.paused and (trigger_ids is None or t in trigger_ids)
        ]
        if paused:
            task = asyncio.ensure_future(self._read_acks(paused))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _read_acks(self, paused: list[Running]) -> None:
        ids = [r.trigger_id for r in paused]
        acked = await self._in_db(
            lambda c: dict(
                c.execute(
                    select(Trigger.id, Trigger.acked_sequence).where(Trigger.id.in_(ids))
                ).all()
            )
        )
        for running in paused:
            running.acked = max(running.acked, acked.get(running.trigger_id, running.acked))
            if running.acks is not None:
                running.acks.set()

    def _close(self, running: Running) -> None:
        assert self._outbox is not None
        self._outbox.put_nowait(
            _Envelope(
                trigger_id=running.trigger_id,
                epoch=running.epoch,
                trigger_run_id=running.trigger_run_id,
                sequence_index=running.next_sequence,
                payload="",
                is_last=True,
                checkpoint=None,
                created_at=self.clock(),
                closes=True,
            )
        )
        running.done = True

    def _emit(self, running: Running, event: Any, *, is_last: bool) -> None:
        from tailrace.sdk import TaskFailedEvent

        try:
            payload = dumps(event.payload)
            if len(payload) > self.max_payload_bytes:
                raise ValueError(
                    f"its payload is {len(payload):,} bytes, over the limit of "
                    f"{self.max_payload_bytes:,} (TAILRACE_MAX_PAYLOAD_BYTES); yield a reference "
                    "(a path, an id) instead of the data"
                )
        except (TypeError, ValueError) as exc:
            payload = dumps(
                TaskFailedEvent(error=f"the trigger's event was refused: {exc}").payload
            )
        envelope = _Envelope(
            trigger_id=running.trigger_id,
            epoch=running.epoch,
            trigger_run_id=running.trigger_run_id,
            sequence_index=running.next_sequence,
            payload=payload,
            is_last=is_last,
            checkpoint=getattr(event, "checkpoint", None),
            created_at=self.clock(),
        )
        running.next_sequence += 1
        running.done = running.done or is_last
        assert self._outbox is not None
        self._outbox.put_nowait(envelope)

    async def _persist_forever(self) -> None:
        assert self._outbox is not None
        outbox = self._outbox
        while True:
            batch = [await outbox.get()]
            # Let every trigger that is ready this tick add its event, then write them all.
            await asyncio.sleep(0)
            while len(batch) < self.batch_size and not outbox.empty():
                batch.append(outbox.get_nowait())
            try:
                written = await self._in_db(lambda c, b=batch: self._write_events(c, b))  # type: ignore[misc]
            except Exception:
                log.exception("writing %d trigger events failed; they will be retried", len(batch))
                for envelope in batch:
                    outbox.put_nowait(envelope)
                for _ in batch:
                    outbox.task_done()
                await asyncio.sleep(1.0)
                continue
            durable = time.time()
            if self.on_durable is not None:
                try:
                    self.on_durable(
                        [(e.trigger_id, e.payload) for e in batch if not e.closes], durable
                    )
                except Exception:  # a measurement hook must not stop the stream
                    log.exception("on_durable hook failed")
            self.stats.events_written += written
            self.stats.batches += 1
            self.stats.lags.extend(
                durable - e.created_at.timestamp() for e in batch if not e.closes
            )
            for _ in batch:
                outbox.task_done()
            if self._outbox_room is not None and outbox.qsize() < self.outbox_limit // 2:
                self._outbox_room.set()
            if written:
                self.on_events({e.trigger_id for e in batch})


def _context_for(path: str | None) -> contextvars.Context:
    context = contextvars.copy_context()
    context.run(current_log_path.set, path)
    return context


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def _chunks(ids: Sequence[int], size: int = 2000) -> Iterator[Sequence[int]]:
    for i in range(0, len(ids), size):
        yield ids[i : i + size]
