"""The triggerer's asyncio side: runs triggers, pumps their generators, batches events.

Each trigger runs in its own asyncio task, in a context naming its task's log file (the
log router sends its lines there). Its events go to an outbox; one persister writes what
is pending as a batch on the database thread, so the loop never waits on the database.
A trigger runs at most ``max_pending`` events ahead of its consumer's acknowledgements
(backpressure), and a flood of unwritten events waits for the writer. A trigger that
keeps blocking the loop is moved, between two events, to a thread of its own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import logging
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine

from tailrace import metrics, tracing
from tailrace.dagfiles import DAG_MODULE_PREFIX, DagFileCache
from tailrace.db import log_failure
from tailrace.execution import log_path_for
from tailrace.metrics import logs
from tailrace.sdk import TaskFailedEvent, TriggerEvent
from tailrace.sdk.connections import redact
from tailrace.sdk.triggers import BaseTrigger, load_trigger
from tailrace.serialization import dumps, loads
from tailrace.store import dead_letters
from tailrace.store.assets import WATCHER_CONSUMER
from tailrace.store.deadlines import DEADLINE_CONSUMER
from tailrace.tracebacks import user_traceback
from tailrace.triggerer._logs import TriggerLogRouter, current_log_path
from tailrace.triggerer._own_loop import OwnLoop
from tailrace.triggerer._store import (
    Claim,
    Envelope,
    TriggerStore,
    Written,
    acked_sequences,
    resume_index,
)

log = logging.getLogger(__name__)
trigger_log = logging.getLogger("tailrace.triggers.runtime")
T = TypeVar("T")

# A trigger that never awaits between events still lets the others run this often.
SLICE_SECONDS = 0.05
# An asset watcher whose trigger fails is started again, waiting this long at first,
# twice as long after each failure in a row, at most WATCHER_RETRY_MAX.
WATCHER_RETRY_FIRST = 1.0
WATCHER_RETRY_MAX = 60.0
# A stream that ended waits this long for its consumer's last acknowledgements, to hand
# them to its source (a queue) before it closes the connection.
DRAIN_SECONDS = 30.0
_END = object()


class Outbox:
    """Events yielded and not yet durable, in order; the persister takes them in batches.

    Past ``limit`` the producers wait for room (half the limit), so a flood of events is
    held back in its generator rather than in memory.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._items: deque[Envelope] = deque()
        self._ready = asyncio.Event()
        self._room = asyncio.Event()
        self._drained = asyncio.Event()
        self._drained.set()

    def put(self, envelope: Envelope) -> None:
        self._items.append(envelope)
        if not self._ready.is_set():
            self._ready.set()
        if self._drained.is_set():
            self._drained.clear()

    def full(self) -> bool:
        return len(self._items) >= self.limit

    async def room(self) -> None:
        self._room.clear()
        await self._room.wait()

    async def take(self, most: int) -> list[Envelope]:
        while not self._items:
            self._ready.clear()
            await self._ready.wait()
        # Let every trigger that is ready this tick add its event, then write them all.
        await asyncio.sleep(0)
        items = self._items
        return [items.popleft() for _ in range(min(most, len(items)))]

    def written(self) -> None:
        if len(self._items) < self.limit // 2:
            self._room.set()
        if not self._items:
            self._drained.set()

    def retry(self, batch: list[Envelope]) -> None:
        """Put a batch that failed to write back in front, in its order."""
        self._items.extendleft(reversed(batch))
        self._ready.set()

    async def drained(self) -> None:
        await self._drained.wait()


class DatabaseThread:
    """One thread for every transaction of the triggerer: short ones, never user code."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="triggerer-db")

    async def run(
        self, fn: Callable[[Connection], T], before: Callable[[], object] | None = None
    ) -> T:
        """``fn`` in a transaction on this thread, after ``before`` (outside it)."""

        def transaction() -> T:
            if before is not None:
                before()
            with self.engine.begin() as conn:
                return fn(conn)

        return await asyncio.get_running_loop().run_in_executor(self._executor, transaction)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True)


@dataclass(eq=False)
class Running:
    """A trigger this triggerer runs: its lease epoch fences every write for it."""

    trigger_id: int
    epoch: int
    trigger_run_id: str
    next_sequence: int
    classpath: str
    label: str  # the task it serves, for people
    log_path: str | None
    task: asyncio.Task[None] | None = None
    trigger: Any = None
    done: bool = False
    consumer: str = "classic"
    # Backpressure: the trigger may run at most max_pending events ahead of `acked`.
    max_pending: int | None = None
    acked: int = -1
    # Sequence indexes past `acked` of redelivered messages dropped at the write: never
    # stored, so never acknowledged, they are not pending (a run of them as long as the
    # window would hold the trigger back for good).
    dropped: list[int] = field(default_factory=list)
    # Created when the trigger first pauses: most never do, and 100,000 idle Events cost.
    acks: asyncio.Event | None = None
    paused: bool = False
    # Steps of its generator so far: the watchdog tells one step that blocks from many
    # quick ones. Set by the watchdog when the trigger keeps blocking the loop; at its
    # next step it starts again on `own_loop`.
    steps: int = 0
    blocks: int = 0
    move_off_loop: bool = False
    own_loop: OwnLoop | None = None
    # The task it serves, as its stream's metrics name it.
    stream: tuple[str, str] = ("", "")
    traceparent: str | None = None
    # A trigger that acknowledges to its source (a queue): the dedup keys of its events
    # by the sequence index they are stored under, until the consumer has acknowledged
    # that index; then they go to ``trigger.acknowledge``, one call at a time.
    source_acks: dict[int, list[str]] | None = None
    acking: asyncio.Lock | None = None
    # Its DAG was seen unpaused, then paused: it was asked to end its stream (once). (A
    # manual run of a paused DAG runs, as in Tailrace it may: only a pause stops it.)
    seen_unpaused: bool = False
    stopping: bool = False
    # Its generator ended and it waits for the last acknowledgements before it closes.
    draining: bool = False
    # The latest checkpoint yielded and its event's index: a watcher started again after
    # a failure resumes there, as another triggerer would.
    checkpoint: Any = None
    checkpoint_sequence: int | None = None
    # Past the highest index an earlier instance of this run stored or yielded (another
    # triggerer's, or this one's before the run moved off the shared loop). Started
    # again, it yields some events again under their old indexes, dropped at the write;
    # its last event must not take one of those, or it would be dropped too.
    stored_up_to: int = 0

    def start_again(self) -> None:
        """From the last checkpoint (else the start), as after a failover."""
        self.stored_up_to = max(self.stored_up_to, self.next_sequence)
        self.next_sequence = resume_index(self.checkpoint_sequence)

    def skip_stored(self) -> None:
        """Before the run's last event: past every index stored already."""
        self.next_sequence = max(self.next_sequence, self.stored_up_to)

    def pending(self) -> int:
        """Events yielded past the consumer's acknowledgement, but for dropped ones."""
        if self.dropped and self.dropped[0] <= self.acked:
            self.dropped = [seq for seq in self.dropped if seq > self.acked]
        return self.next_sequence - 1 - self.acked - len(self.dropped)


@dataclass
class TriggererStats:
    claimed: int = 0
    events_written: int = 0
    batches: int = 0
    # Seconds from an event's creation to its commit, for the most recent events.
    lags: deque[float] = field(default_factory=lambda: deque(maxlen=200_000))


class TriggerRunner:
    """Everything the triggerer does on its event loop; ``open()`` there before use."""

    def __init__(
        self,
        store: TriggerStore,
        db: DatabaseThread,
        *,
        name: str,
        log_folder: str,
        max_payload_bytes: int,
        batch_size: int,
        clock: Callable[[], datetime],
    ) -> None:
        self.store = store
        self.db = db
        self.name = name
        self.log_folder = log_folder
        self.max_payload_bytes = max_payload_bytes
        self.batch_size = batch_size
        self.clock = clock
        self.running: dict[int, Running] = {}
        self.stats = TriggererStats()
        # Called with the ids of triggers whose new events are durable: wakes the scheduler.
        self.on_events: Callable[[set[int]], None] = lambda trigger_ids: None
        # Called when asset watchers' events became asset events: consumers may be due.
        self.on_asset_events: Callable[[], None] = lambda: None
        # Measurement hook: each durable batch's (trigger id, JSON payload) and commit time.
        self.on_durable: Callable[[list[tuple[int, str]], float], None] | None = None
        self.router = TriggerLogRouter()
        # When the loop last ran something else (the watchdog's ticker): a step that
        # suspended gave the others their turn, one that did not held the loop.
        self.loop_stamp: Callable[[], float] = lambda: 0.0
        self.loop: asyncio.AbstractEventLoop | None = None
        self._outbox: Outbox | None = None
        self._background: set[asyncio.Future[None]] = set()
        self._dag_files = DagFileCache()
        # Called (on the loop) as a trigger starts: the watchdog watches while any run.
        self.on_start: Callable[[], None] = lambda: None
        # Makes the trigger a claim names (a test may hand in recorded events instead).
        self.load_trigger: Callable[[str, dict[str, Any]], Any] = load_trigger

    def open(self) -> None:
        self.loop = asyncio.get_running_loop()
        # Unwritten events the loop may hold before producers wait for the writer.
        self._outbox = Outbox(4 * self.batch_size)

    # -- starting and stopping triggers ---------------------------------------------------

    def start(self, claim: Claim) -> None:
        self.on_start()
        task = claim.task
        if task is not None:
            label = f"{task.dag_id}.{task.task_id}"
            label += f"[{task.map_index}]" if task.map_index >= 0 else ""
            label += f" (run {task.run_id}, try {task.try_number})"
            path: str | None = str(
                log_path_for(
                    self.log_folder,
                    task.dag_id,
                    task.run_id,
                    task.task_id,
                    task.map_index,
                    task.try_number,
                )
            )
        elif claim.consumer == WATCHER_CONSUMER:
            label, path = f"asset watcher trigger {claim.trigger_id}", None
        elif claim.consumer == DEADLINE_CONSUMER:
            label, path = f"deadline callback trigger {claim.trigger_id}", None
        else:
            label, path = f"trigger {claim.trigger_id} (no deferred task)", None
        # A run taken over from a dead triggerer resumes after its last checkpoint (or
        # from the start); the events it repeats carry sequence numbers already stored.
        running = Running(
            trigger_id=claim.trigger_id,
            epoch=claim.epoch,
            trigger_run_id=claim.trigger_run_id,
            next_sequence=claim.resume_at,
            classpath=claim.classpath,
            label=label,
            log_path=path,
            consumer=claim.consumer,
            max_pending=claim.max_pending,
            acked=claim.acked,
            stream=(task.dag_id, task.task_id) if task is not None else ("", ""),
            traceparent=claim.traceparent,
            checkpoint=claim.checkpoint,
            checkpoint_sequence=claim.checkpoint_sequence,
            stored_up_to=claim.stored_up_to,
            seen_unpaused=task is not None and not task.dag_paused,
        )
        self.running[claim.trigger_id] = running
        self.stats.claimed += 1
        context = contextvars.copy_context()
        context.run(current_log_path.set, path)
        if task is not None:
            log_context = logs.TaskLogContext(
                task.dag_id, task.run_id, task.task_id, task.map_index, task.try_number
            )
            context.run(logs.set_task_context, log_context)
        running.task = context.run(
            asyncio.create_task,
            self._run_trigger(running, claim.kwargs, claim.fileloc),
            name=f"trigger-{claim.trigger_id}",
        )

    def cancel(self, trigger_ids: list[int]) -> None:
        for trigger_id in trigger_ids:
            running = self.running.get(trigger_id)
            # One draining has ended: its stream completed, which is why it is "lost".
            if running is not None and running.task is not None and not running.draining:
                running.task.cancel()

    def stoppable(self) -> list[int]:
        """Triggers serving a deferred task that could end their stream if its DAG were
        paused (``BaseTrigger.stop_gracefully``), and were not asked yet."""
        return [
            t
            for t, r in self.running.items()
            if r.trigger is not None
            and r.log_path is not None
            and not r.stopping
            and type(r.trigger).stop_gracefully is not BaseTrigger.stop_gracefully
        ]

    def follow_pauses(self, paused: Mapping[int, bool]) -> None:
        """Whether the DAGs of these stoppable triggers are paused: one whose DAG was
        unpaused and is paused now ends its stream (its own log says so)."""
        for trigger_id, is_paused in paused.items():
            running = self.running.get(trigger_id)
            if running is None or running.trigger is None or running.stopping:
                continue
            if not is_paused:
                running.seen_unpaused = True
            elif running.seen_unpaused:
                running.stopping = running.trigger.stop_gracefully()

    async def shutdown(self, *, drain: bool = True) -> None:
        """Cancel every trigger and, with ``drain``, wait until what they produced is
        written (without: the writer has stopped, and nothing would write it)."""
        tasks = [r.task for r in self.running.values() if r.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert self._outbox is not None
        if not drain:
            return
        with contextlib.suppress(TimeoutError):  # a database that is down loses nothing:
            await asyncio.wait_for(self._outbox.drained(), 30)  # unwritten events are re-run

    def close(self) -> None:
        self.router.close()

    # -- one trigger ----------------------------------------------------------------------

    async def _run_trigger(
        self, running: Running, kwargs: dict[str, Any], fileloc: str | None
    ) -> None:
        if not tracing.enabled():
            await self._watch(running, kwargs, fileloc)
            return
        # The trigger run's span, current while it runs (an HTTP trigger's requests are its
        # children); its id is derived, so the scheduler names it as the parent of the
        # batches of events it hands on.
        parent = tracing.ids_of(running.traceparent)
        context = tracing.context_of(running.traceparent)
        span_id = tracing.trigger_run_span_id(parent[0], running.trigger_run_id) if parent else None
        attributes: dict[str, str | int] = {
            "tailrace.trigger_id": running.trigger_id,
            "tailrace.trigger_run_id": running.trigger_run_id,
            "tailrace.classpath": running.classpath,
            "tailrace.serves": running.label,
            "tailrace.triggerer": self.name,
        }
        name = f"trigger {running.classpath.rpartition('.')[2]}"
        with tracing.live_span(
            "triggerer", name, context=context, span_id=span_id, attributes=attributes
        ) as span:
            first = running.next_sequence
            try:
                await self._watch(running, kwargs, fileloc)
            finally:
                span.set_attribute("tailrace.events", running.next_sequence - first)

    async def _watch(self, running: Running, kwargs: dict[str, Any], fileloc: str | None) -> None:
        delay = WATCHER_RETRY_FIRST
        while True:
            failed = await self._run_once(running, kwargs, fileloc)
            if not failed or running.consumer != WATCHER_CONSUMER:
                return
            # A watcher has no task to fail: it watches again, from its last checkpoint.
            trigger_log.warning(
                "Asset watcher trigger %s starts again in %.0fs", running.classpath, delay
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, WATCHER_RETRY_MAX)
            if running.checkpoint_sequence is not None:
                running.next_sequence = running.checkpoint_sequence + 1

    async def _run_once(
        self, running: Running, kwargs: dict[str, Any], fileloc: str | None
    ) -> bool:
        """Run the trigger until its generator ends; True if it failed."""
        classpath = running.classpath
        generator = None
        retry = False
        try:
            module = classpath.rpartition(".")[0]
            in_dag_file = (
                module.startswith(DAG_MODULE_PREFIX) or running.consumer == DEADLINE_CONSUMER
            )
            if fileloc is not None and in_dag_file:
                # Defined in the DAG file itself: import that file (off the loop) first.
                await asyncio.to_thread(self._dag_files.get, fileloc)
            # The runtime's own lines are for the task's log; without one they cost for nothing.
            chatty = running.log_path is not None
            if chatty:
                trigger_log.info(
                    "Trigger %s started in triggerer %s for %s", classpath, self.name, running.label
                )
            generator = self._start(running, kwargs)
            first = running.next_sequence
            produced, moving = await self._pump(running, generator, chatty)
            if moving:
                reached = running.next_sequence
                generator = await self._start_again_elsewhere(running, generator, kwargs)
                await self._pump(running, generator, chatty)
                # What it yields again is not new.
                produced = max(reached, running.next_sequence) - first
            if produced == 0 and running.consumer == "classic":
                error = f"trigger {classpath} ended without yielding an event"
                self._emit(running, TaskFailedEvent(error=error).payload, None, is_last=True)
                metrics.get().triggers_failed.inc()
            else:
                metrics.get().triggers_succeeded.inc()
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
            if running.consumer == WATCHER_CONSUMER:
                retry = True
                await self._on_its_loop(running, _wind_down(running, generator))
                return True
            failed = TaskFailedEvent(error=f"trigger {classpath} failed:\n{error}")
            self._emit(running, failed.payload, None, is_last=True)
            metrics.get().triggers_failed.inc()
        finally:
            if not retry:
                await self._finish(running, generator)
        return False

    def _start(self, running: Running, kwargs: dict[str, Any]) -> AsyncIterator[Any]:
        """A new instance of the trigger, at its last checkpoint: its events' generator."""
        trigger = self.load_trigger(running.classpath, kwargs)
        trigger.checkpoint = running.checkpoint
        if running.stopping:  # started again after its DAG was paused: it stops too
            trigger.stop_gracefully()
        running.trigger = trigger
        if type(trigger).acknowledge is not BaseTrigger.acknowledge:
            running.source_acks = running.source_acks or {}
            running.acking = running.acking or asyncio.Lock()
        generator: AsyncIterator[Any] = trigger.run()
        return generator

    async def _start_again_elsewhere(
        self, running: Running, generator: Any, kwargs: dict[str, Any]
    ) -> AsyncIterator[Any]:
        """The trigger keeps blocking the shared loop: it starts again on a loop of its own.

        Its generator cannot move there as it is: what it opened (a client, a connection,
        a queue it waited on) belongs to the loop it was opened on. So it is closed here
        and a new instance runs there from the last checkpoint (else from the start), as
        after a failover: the events it yields again take the indexes they were stored
        under and are stored once. Messages of a queue it had yet to acknowledge are
        delivered again (at once, or after the broker's visibility timeout), recognised by
        their key and acknowledged then.
        """
        await _wind_down(running, generator)
        running.own_loop = OwnLoop(f"trigger-{running.trigger_id}")
        running.start_again()
        seq = running.checkpoint_sequence
        if running.source_acks:
            running.source_acks.clear()  # receipts of the closed instance
        trigger_log.warning(
            "Trigger %s starts again on a thread of its own, from %s",
            running.classpath,
            "its start" if seq is None else f"its last checkpoint (event {seq})",
        )
        return self._start(running, kwargs)

    async def _on_its_loop(self, running: Running, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` of the trigger's on the loop it runs on (its own, once moved)."""
        own = running.own_loop
        return await (coro if own is None else own.run(coro))

    async def _finish(self, running: Running, generator: Any) -> None:
        try:
            if running.done and running.source_acks:
                await self._drain(running)
        finally:  # a shutdown cuts the drain short, not the cleanup
            await self._close_trigger(running, generator)

    async def _close_trigger(self, running: Running, generator: Any) -> None:
        own = running.own_loop
        if own is None:
            await _wind_down(running, generator)
        else:
            try:
                # A step still blocked there must not hold the triggerer's shutdown.
                await asyncio.wait_for(own.run_last(_wind_down(running, generator)), 30)
            except TimeoutError:
                trigger_log.warning(
                    "Trigger %s is still blocked after 30s; leaving its thread behind",
                    running.classpath,
                )
            finally:
                own.stop()
        self.running.pop(running.trigger_id, None)
        self.router.close_file(running.log_path)

    async def _pump(self, running: Running, generator: Any, chatty: bool) -> tuple[int, bool]:
        """Pull events from the trigger as backpressure allows; returns how many, and
        whether it stopped to move the trigger off the shared loop."""
        outbox = self._outbox
        assert outbox is not None
        produced = 0
        slice_began, slice_stamp = time.monotonic(), self.loop_stamp()
        while True:
            limit = running.max_pending
            if limit is not None and running.pending() >= limit:
                await self._backpressure(running)
            if outbox.full():
                # Events not yet written are held in memory: a flood waits for the writer.
                await outbox.room()
            if time.monotonic() - slice_began > SLICE_SECONDS:
                if self.loop_stamp() == slice_stamp:
                    # It has held the loop all along (a trigger that never awaits would
                    # hold it for good): the others' turn. Otherwise the next step comes
                    # at once, so an event and the end that follows it share a batch.
                    await asyncio.sleep(0)
                slice_began, slice_stamp = time.monotonic(), self.loop_stamp()
            if running.own_loop is not None:
                item = await running.own_loop.run(_step(generator))
                if item is _END:
                    return produced, False
            elif running.move_off_loop:
                return produced, True
            else:
                try:
                    item = await anext(generator)
                except StopAsyncIteration:
                    return produced, False
            running.steps += 1
            if isinstance(item, TriggerEvent):
                payload, checkpoint, key = item.payload, item.checkpoint, item.dedup_key
            else:
                payload, checkpoint, key = item, None, None
            if chatty and produced < 3:
                trigger_log.info("Trigger fired: %.200r", payload)
            produced += 1
            self._emit(running, payload, checkpoint, is_last=False, dedup_key=key)

    async def _backpressure(self, running: Running) -> None:
        """Wait while the trigger is max_pending events ahead of its consumer's acks."""
        limit = running.max_pending
        if limit is not None and running.pending() >= limit:
            metrics.get().stream_backpressure_pauses.labels(*running.stream).inc()
        while limit is not None and running.pending() >= limit:
            running.paused = True
            if running.acks is None:
                running.acks = asyncio.Event()
            running.acks.clear()
            await running.acks.wait()
        running.paused = False

    # -- acknowledgements -----------------------------------------------------------------

    def acks_arrived(self, trigger_ids: set[int]) -> None:
        """Thread-safe: consumers acknowledged events of these triggers."""
        loop = self.loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self.refresh_acks, trigger_ids)

    def refresh_acks(self, trigger_ids: set[int] | None) -> None:
        """Read the acknowledgements of the paused triggers (among ``trigger_ids``)."""
        paused = [
            r
            for t, r in self.running.items()
            if (r.paused or r.source_acks) and (trigger_ids is None or t in trigger_ids)
        ]
        if paused:
            task = asyncio.ensure_future(self._read_acks(paused))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _read_acks(self, paused: list[Running]) -> None:
        ids = [r.trigger_id for r in paused]
        acked = await self.db.run(lambda c: acked_sequences(c, ids))
        for running in paused:
            running.acked = max(running.acked, acked.get(running.trigger_id, running.acked))
            if running.acks is not None:
                running.acks.set()
            self._ack_source(running)

    def _ack_source(self, running: Running) -> None:
        """Hand the trigger the keys of its events its consumer has acknowledged."""
        pending = running.source_acks
        if not pending:
            return
        done = [seq for seq in pending if seq <= running.acked]
        if not done:
            return
        keys = [key for seq in sorted(done) for key in pending.pop(seq)]
        task = asyncio.ensure_future(self._acknowledge(running, keys))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _drain(self, running: Running) -> None:
        """The generator ended (a queue trigger stopped, its DAG paused): acknowledge what
        the consumer still finishes before the source's connection closes, for up to
        DRAIN_SECONDS. Whatever is left is delivered again next time, recognised by its
        key and acknowledged then."""
        running.draining = True
        if running.acks is None:
            running.acks = asyncio.Event()
        deadline = time.monotonic() + DRAIN_SECONDS
        while running.source_acks and (left := deadline - time.monotonic()) > 0:
            # Woken when acknowledgements are read (on a scheduler's notice, or the sync's
            # look at triggers owing acks), which hands them on; else read once a second.
            running.acks.clear()
            try:
                await asyncio.wait_for(running.acks.wait(), min(left, 1.0))
            except TimeoutError:
                self.refresh_acks({running.trigger_id})  # no notice: read them, once a second
        if running.acking is not None:
            async with running.acking:  # the last acknowledgement has returned
                pass

    async def _acknowledge(self, running: Running, keys: list[str]) -> None:
        assert running.acking is not None
        async with running.acking:  # in order, one call at a time
            try:
                await self._dead_letter(running, keys)
                await self._on_its_loop(running, running.trigger.acknowledge(keys))
            except Exception:
                # Not acknowledged: the source delivers them again, and the redelivery,
                # recognised by its key, is acknowledged then.
                trigger_log.exception(
                    "Trigger %s could not acknowledge %d messages", running.classpath, len(keys)
                )

    async def _dead_letter(self, running: Running, keys: list[str]) -> None:
        """Before their messages are acknowledged, those that failed every try of their
        consumer go to the broker's dead letters (a broker without them: the table only).
        Raising leaves them unacknowledged: redelivered, recognised, tried again."""
        trigger_id = running.trigger_id
        letters = await self.db.run(lambda c: dead_letters.among(c, trigger_id, keys))
        if letters:
            entries = [(key, loads(payload), _summary(reason)) for key, payload, reason in letters]
            await self._on_its_loop(running, running.trigger.dead_letter(entries))

    # -- events ---------------------------------------------------------------------------

    def _close(self, running: Running) -> None:
        assert self._outbox is not None
        running.skip_stored()
        self._outbox.put(
            Envelope(
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

    def _emit(
        self,
        running: Running,
        value: Any,
        checkpoint: Any,
        *,
        is_last: bool,
        dedup_key: str | None = None,
    ) -> None:
        try:
            payload = dumps(value)
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
        if is_last:
            running.skip_stored()
        envelope = Envelope(
            trigger_id=running.trigger_id,
            epoch=running.epoch,
            trigger_run_id=running.trigger_run_id,
            sequence_index=running.next_sequence,
            payload=payload,
            is_last=is_last,
            checkpoint=checkpoint,
            created_at=self.clock(),
            stream=running.stream,
            dedup_key=None if dedup_key is None else str(dedup_key),
        )
        if checkpoint is not None:
            running.checkpoint, running.checkpoint_sequence = checkpoint, envelope.sequence_index
        if dedup_key is not None and running.source_acks is not None:
            running.source_acks[envelope.sequence_index] = [str(dedup_key)]
        running.next_sequence += 1
        running.done = running.done or is_last
        assert self._outbox is not None
        self._outbox.put(envelope)

    async def persist_forever(self) -> None:
        assert self._outbox is not None
        outbox = self._outbox
        dialect = self.db.engine.dialect.name
        while True:
            batch = await outbox.take(self.batch_size)
            try:
                result = await self.db.run(
                    lambda c, b=batch: self.store.write(c, b),  # type: ignore[misc]
                    before=lambda b=batch: self.store.prepare(dialect, b),  # type: ignore[misc]
                )
            except Exception as exc:
                what = f"writing {len(batch)} trigger events"
                log_failure(log, exc, what, "they will be retried")
                outbox.retry(batch)
                await asyncio.sleep(1.0)
                continue
            durable = time.time()
            if self.on_durable is not None:
                _after_durable(
                    "on_durable",
                    self.on_durable,
                    [(e.trigger_id, e.payload) for e in batch if not e.closes],
                    durable,
                )
            written = result.accepted
            self._after_write(batch, result)
            self.stats.events_written += written
            self.stats.batches += 1
            self.stats.lags.extend(
                durable - e.created_at.timestamp() for e in batch if not e.closes
            )
            outbox.written()
            self._count_produced(batch)
            # A watcher's events are its asset events, acknowledged already: they concern
            # the DAGs scheduled on the asset, not a consumer of the trigger.
            consumed = {e.trigger_id for e in batch} - result.watchers
            if written and consumed:
                _after_durable("telling the scheduler of new events", self.on_events, consumed)
            if result.asset_events:
                _after_durable("telling the scheduler of asset events", self.on_asset_events)

    def _count_produced(self, batch: list[Envelope]) -> None:
        m = metrics.get()
        if m.enabled:
            # One increment per stream and batch, not per event.
            for stream, n in Counter(e.stream for e in batch if not e.closes).items():
                m.stream_events_produced.labels(*stream).inc(n)

    def _after_write(self, batch: list[Envelope], result: Written) -> None:
        """Redeliveries are acknowledged with the copy stored before; a watcher's events
        are done once written (their asset events committed with them)."""
        for (trigger_id, seq), stored in sorted(result.duplicates.items()):
            running = self.running.get(trigger_id)
            if running is None:
                continue
            running.dropped.append(seq)
            if running.source_acks is not None:
                keys = running.source_acks.pop(seq, [])
                running.source_acks.setdefault(stored, []).extend(keys)
        touched = {trigger_id for trigger_id, _ in result.duplicates}
        for trigger_id in touched:
            running = self.running.get(trigger_id)
            if running is not None and running.paused and running.acks is not None:
                running.acks.set()  # held back by what was dropped: it may go on
        for e in batch:
            if e.trigger_id in result.watchers:
                running = self.running.get(e.trigger_id)
                if running is not None:
                    running.acked = max(running.acked, e.sequence_index)
        for trigger_id in touched | result.watchers:
            running = self.running.get(trigger_id)
            if running is not None:
                self._ack_source(running)


def _after_durable(what: str, hook: Callable[..., object], *args: Any) -> None:
    """Call a hook that follows a write (a wake-up, a measurement). Its failure must not
    stop the writer: the events are durable, and whoever the hook would have woken finds
    them on its next poll."""
    try:
        hook(*args)
    except Exception:
        log.exception("%s failed after a write; the events are stored", what)


async def _step(generator: AsyncIterator[Any]) -> Any:
    try:
        return await anext(generator)
    except StopAsyncIteration:
        return _END


async def _wind_down(running: Running, generator: Any) -> None:
    close = getattr(generator, "aclose", None)
    if close is not None:
        with contextlib.suppress(Exception):
            await close()
    if running.trigger is not None:
        try:
            await running.trigger.cleanup()
        except Exception:
            trigger_log.exception("cleanup() of trigger %s failed", running.classpath)


def _summary(reason: str) -> str:
    """An error's last line (the exception), short enough for a broker's header."""
    lines = reason.strip().splitlines()
    return (lines[-1] if lines else "the handler failed")[:1000]
