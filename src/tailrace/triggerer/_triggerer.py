"""The triggerer: one asyncio loop running many triggers, each leased from the database.

It composes the database side (``_store``: claims, leases, fenced event writes) and the
asyncio side (``_runner``: running triggers, backpressure, batches, log routing). Claims,
lease renewal and event writes happen on one database thread, in short transactions, so
the loop never waits on the database. After each batch of events the scheduler is woken;
after the scheduler creates or cancels triggers, so is the triggerer. A slow poll (a third
of the lease) renews leases and is the safety net.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Collection
from datetime import datetime

from sqlalchemy import Engine

from tailrace import metrics
from tailrace.clock import utcnow
from tailrace.connections import DatabaseConnections
from tailrace.cross_dag import use_engine
from tailrace.dagfiles import prepare_import_path
from tailrace.db import log_failure
from tailrace.sdk.connections import set_connection_source
from tailrace.sdk.variables import set_variable_source
from tailrace.triggerer._own_loop import loop_factory
from tailrace.triggerer._runner import DatabaseThread, Running, TriggererStats, TriggerRunner
from tailrace.triggerer._store import TriggerStore
from tailrace.triggerer._watchdog import LoopWatchdog
from tailrace.variables import DatabaseVariables

log = logging.getLogger(__name__)


class Triggerer:
    def __init__(
        self,
        engine: Engine,
        *,
        log_folder: str,
        capacity: int = 1000,
        lease_seconds: float = 30.0,
        max_payload_bytes: int = 1 << 20,
        block_warning_seconds: float | None = 0.2,
        batch_size: int = 5000,
        clock: Callable[[], datetime] = utcnow,
        only_runs: Collection[int] | None = None,
        safety_poll: bool = True,
    ) -> None:
        self.engine = engine
        self.capacity = capacity
        self.lease_seconds = lease_seconds
        self.block_warning_seconds = block_warning_seconds
        self.clock = clock
        # Unique, and telling people where it runs.
        self.name = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.store = TriggerStore(lease_seconds=lease_seconds, clock=clock, only_runs=only_runs)
        self.db = DatabaseThread(engine)
        self.runner = TriggerRunner(
            self.store,
            self.db,
            name=self.name,
            log_folder=log_folder,
            max_payload_bytes=max_payload_bytes,
            batch_size=batch_size,
            clock=clock,
        )
        # The safety-net poll renews leases; without it (a virtual-time loop, where only
        # wake-ups count) the triggerer syncs when woken.
        self.poll_seconds = lease_seconds / 3 if safety_poll else None
        # None: no watchdog (a virtual-time loop, where real stalls mean nothing).
        self.watchdog: LoopWatchdog | None = None
        if block_warning_seconds is not None:
            watchdog = self.watchdog = LoopWatchdog(self.runner, block_warning_seconds)
            self.runner.loop_stamp = lambda: watchdog.stamp
            self.runner.on_start = watchdog.trigger_started
        # Told when run_in_thread's triggerer stops on an error (its process should stop
        # too, and a supervisor start it again, rather than hold triggers it cannot run).
        self.on_fatal: Callable[[str], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._stop: asyncio.Event | None = None
        self._last_lost_check = 0.0

    # What the runner holds, for the processes that wire a triggerer up and for tests.

    @property
    def job_id(self) -> int:
        return self.store.job_id

    @property
    def running(self) -> dict[int, Running]:
        return self.runner.running

    @property
    def stats(self) -> TriggererStats:
        return self.runner.stats

    @property
    def on_events(self) -> Callable[[set[int]], None]:
        return self.runner.on_events

    @on_events.setter
    def on_events(self, callback: Callable[[set[int]], None]) -> None:
        self.runner.on_events = callback

    @property
    def on_asset_events(self) -> Callable[[], None]:
        return self.runner.on_asset_events

    @on_asset_events.setter
    def on_asset_events(self, callback: Callable[[], None]) -> None:
        self.runner.on_asset_events = callback

    @property
    def on_durable(self) -> Callable[[list[tuple[int, str]], float], None] | None:
        return self.runner.on_durable

    @on_durable.setter
    def on_durable(self, callback: Callable[[list[tuple[int, str]], float], None] | None) -> None:
        self.runner.on_durable = callback

    def acks_arrived(self, trigger_ids: set[int]) -> None:
        """Thread-safe: consumers acknowledged events of these triggers."""
        self.runner.acks_arrived(trigger_ids)

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
            try:
                with asyncio.Runner(loop_factory=loop_factory()) as runner:
                    runner.run(self.run(started))
            except Exception as exc:
                log.exception("the triggerer stopped")
                if self.on_fatal is not None:
                    self.on_fatal(f"the triggerer stopped: {exc}")
            finally:
                started.set()  # it will not start: the caller waits no longer

        thread = threading.Thread(target=main, name="triggerer", daemon=True)
        thread.start()
        started.wait(timeout=30)
        return thread

    async def run(self, started: threading.Event | None = None) -> None:
        prepare_import_path()  # trigger classpaths in modules beside the DAGs resolve
        self._loop = asyncio.get_running_loop()
        self._stop = stop = asyncio.Event()
        self._wake = asyncio.Event()
        self.runner.open()
        root = logging.getLogger()
        root.addHandler(self.runner.router)
        # Triggers may read connections from the database directly (hooks in triggers).
        connection_source = set_connection_source(DatabaseConnections(self.engine))
        variable_source = set_variable_source(DatabaseVariables(self.engine))
        # TriggerDagRunOperator's and ExternalTaskSensor's triggers read the database.
        cross_dag = contextlib.ExitStack()
        cross_dag.enter_context(use_engine(self.engine))
        # Triggers' INFO lines must reach their tasks' logs; consoles filter by handler level.
        if root.getEffectiveLevel() > logging.INFO:
            root.setLevel(logging.INFO)
        await self.db.run(self.store.register)
        if self.watchdog is not None:
            self.watchdog.start(self._loop)
        persister = asyncio.create_task(self.runner.persist_forever(), name="triggerer-persist")
        if started is not None:
            started.set()
        try:
            while not stop.is_set():
                try:
                    await self._sync()
                except Exception as exc:
                    log_failure(log, exc, "triggerer sync", "retrying")
                self._wake.clear()
                waiters = [asyncio.create_task(self._wake.wait()), asyncio.create_task(stop.wait())]
                await asyncio.wait(
                    [*waiters, persister],
                    timeout=self.poll_seconds,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                for w in waiters:
                    w.cancel()
                if persister.done():
                    # It never returns: without it no event is stored, and the triggers
                    # we hold would wait for good. Stop, and let them go to another.
                    raise RuntimeError("the event writer stopped") from persister.exception()
        finally:
            await self.runner.shutdown(drain=not persister.done())
            persister.cancel()
            await asyncio.gather(persister, return_exceptions=True)
            # Hand our triggers back at once instead of making others wait out the lease.
            await self.db.run(self.store.release_all)
            if self.watchdog is not None:
                self.watchdog.stop()
            root.removeHandler(self.runner.router)
            set_connection_source(connection_source)
            set_variable_source(variable_source)
            cross_dag.close()
            self.runner.close()
            self.db.shutdown()

    async def _sync(self) -> None:
        running = self.runner.running
        # Finding lost triggers reads every trigger we hold: with many, at most once a second.
        check = len(running) < 1000 or time.monotonic() - self._last_lost_check > 1.0
        held = {t for t, r in running.items() if not r.done} if check else None
        if check:
            self._last_lost_check = time.monotonic()
        free = self.capacity - len(running)
        # Queue streams end when their DAG is paused: asked on the same (rate-limited) check.
        stoppable = self.runner.stoppable() if check else []
        sync = await self.db.run(lambda c: self.store.sync(c, held, free, stoppable))
        self.runner.cancel(sync.lost)
        self.runner.follow_pauses(sync.paused)
        for claim in sync.claims:
            self.runner.start(claim)
        m = metrics.get()
        m.triggers_running.set(len(running))
        m.triggerer_capacity_left.set(self.capacity - len(running))
        # Acks may have come from a scheduler in another process: backpressured triggers
        # look again on every sync.
        self.runner.refresh_acks(None)
