"""Run DAGs inside a test on a virtual clock that skips to the next timer when all waits.

The real scheduler (its loop step, pass, dispatch, the state machine and the store), the
real triggerer (its store and runner) and the real worker runtime run in this thread, in
turns: a scheduler step, then the tasks it queued (inline, through the worker runtime),
then the triggerer's event loop until nothing on it is ready. When none of them has
anything to do, the clock jumps to the earliest timer any of them holds — a retry, a
scheduled run, a deferral's timeout, a trigger's ``asyncio.sleep`` — and the turns go on.
A day-long sensor costs a few turns, not a day. Temporal's time-skipping test environment
is the model.
"""

from __future__ import annotations

import asyncio
import json
import math
import selectors
import shutil
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar, TypeVarTuple

from sqlalchemy import select

from tailrace import clock as clock_module
from tailrace.dag_processing import SyncReport, sync_parsed
from tailrace.dag_processing._parse import parse_file
from tailrace.dagfiles import list_dag_files, prepare_import_path
from tailrace.dagrun import trigger_dag_run
from tailrace.db.engine import create_engine
from tailrace.db.models import DagRun
from tailrace.executors.inline import InlineExecutor
from tailrace.scheduler import Scheduler
from tailrace.sdk import BaseTrigger, TriggerEvent
from tailrace.sdk.triggers import load_trigger
from tailrace.state import FINISHED_RUN_STATES
from tailrace.testing._clock import FakeClock
from tailrace.testing._db import migrate_database, temporary_sqlite_url
from tailrace.testing._harness import RunQueries
from tailrace.triggerer import Triggerer

DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC)
# How long the loop waits in real time for a thread it handed work to (the triggerer's
# database thread) or for a socket a trigger awaits before looking again.
_REAL_WAIT_SECONDS = 5.0
# Turns at one moment of virtual time without the run finishing: something spins.
_MAX_TURNS_AT_ONE_MOMENT = 10_000


T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class StuckError(AssertionError):
    """Nothing can happen any more (no work, no timer) and the awaited condition is unmet."""


# -- the event loop -----------------------------------------------------------------------


class _IdleSelector(selectors.DefaultSelector):
    """Polls; where the loop would block with nothing of its own in flight, it stops the
    loop instead and remembers when its next timer is due."""

    loop: VirtualTimeLoop
    # The loop's own self-pipe, registered while it is made: not I/O anyone awaits.
    own: frozenset[int] = frozenset()

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready: list[tuple[selectors.SelectorKey, int]] = super().select(0)
        if ready or timeout == 0:
            return ready
        loop = self.loop
        awaited_io = any(key.fd not in self.own for key in self.get_map().values())
        if loop.in_flight or awaited_io:
            # A thread's result comes back through the self-pipe, a socket's data when it
            # comes: real waits, in real time. Virtual time moves on only if nothing came.
            waited: list[tuple[selectors.SelectorKey, int]] = super().select(_REAL_WAIT_SECONDS)
            if waited or loop.in_flight:
                return waited
        loop.next_timer = None if timeout is None else loop.time() + timeout
        loop.stop()
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose time is ``clock`` and which, instead of blocking, returns from
    :meth:`run_until_idle`.

    Its time counts seconds from the clock's start, not the epoch: a float that large
    cannot hold asyncio's nanosecond resolution, and a timer would be due without firing.
    """

    def __init__(self, clock: FakeClock) -> None:
        self._clock = clock
        self._origin = clock.now
        self.in_flight = 0  # run_in_executor calls not yet answered
        self.next_timer: float | None = None
        selector = _IdleSelector()
        super().__init__(selector)
        selector.loop = self
        selector.own = frozenset(key.fd for key in selector.get_map().values())

    def time(self) -> float:
        return (self._clock.now - self._origin).total_seconds()

    def run_in_executor(
        self, executor: Executor | None, func: Callable[[*Ts], T], *args: *Ts
    ) -> asyncio.Future[T]:
        future = super().run_in_executor(executor, func, *args)
        self.in_flight += 1
        future.add_done_callback(self._answered)
        return future

    def _answered(self, future: asyncio.Future[Any]) -> None:
        self.in_flight -= 1

    def run_until_idle(self) -> None:
        """Run callbacks until none is ready, no timer is due and no thread is working."""
        self.next_timer = None
        self.run_forever()

    def next_moment(self) -> datetime | None:
        """When the earliest timer of the loop falls due (rounded up to a microsecond)."""
        if self.next_timer is None:
            return None
        return self._origin + timedelta(microseconds=math.ceil(self.next_timer * 1e6))


# -- recorded and synthetic event streams -------------------------------------------------


@dataclass(frozen=True)
class RecordedEvent:
    """One event of a stream: ``after`` seconds from the trigger's start, its payload, and
    the checkpoint it carried."""

    after: float
    payload: Any
    checkpoint: Any = None


class EventRecording:
    """A trigger's events with their timing: made up, loaded from JSON lines, or recorded
    from a real trigger. Fed to a trigger class with :meth:`TimeSkippingHarness.feed`."""

    def __init__(self, events: Iterable[RecordedEvent]) -> None:
        self.events = tuple(events)
        offsets = [e.after for e in self.events]
        if offsets != sorted(offsets) or any(o < 0 for o in offsets):
            raise ValueError("recorded events must come in order, at offsets of 0 s or more")

    @classmethod
    def synthetic(
        cls, payloads: Iterable[Any], *, every: timedelta | float = 0.0, first_after: float = 0.0
    ) -> EventRecording:
        """``payloads`` one after another, ``every`` apart (the first after ``first_after``)."""
        step = every.total_seconds() if isinstance(every, timedelta) else float(every)
        return cls(RecordedEvent(first_after + i * step, p) for i, p in enumerate(payloads))

    @classmethod
    def load(cls, path: str | Path) -> EventRecording:
        """JSON lines of ``{"after": seconds, "payload": ..., "checkpoint": ...}``."""
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        return cls(RecordedEvent(**json.loads(line)) for line in lines if line.strip())

    def save(self, path: str | Path) -> None:
        with open(path, "w", encoding="utf-8") as out:
            for e in self.events:
                row = {"after": e.after, "payload": e.payload, "checkpoint": e.checkpoint}
                out.write(json.dumps(row) + "\n")

    @classmethod
    async def record(cls, trigger: BaseTrigger, *, limit: int | None = None) -> EventRecording:
        """Run a real trigger (in real time, on the running loop) and keep what it yields,
        up to ``limit`` events."""
        loop = asyncio.get_running_loop()
        began = loop.time()
        events = []
        async for item in trigger.run():
            event = item if isinstance(item, TriggerEvent) else TriggerEvent(item)
            events.append(RecordedEvent(loop.time() - began, event.payload, event.checkpoint))
            if limit is not None and len(events) >= limit:
                break
        return cls(events)


class RecordedTrigger(BaseTrigger):
    """Plays an :class:`EventRecording` back on the triggerer's (virtual-time) loop, in
    place of the trigger a task deferred to."""

    def __init__(self, recording: EventRecording, classpath: str, kwargs: dict[str, Any]) -> None:
        super().__init__()
        self.recording = recording
        self.classpath = classpath
        self.kwargs = kwargs

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return self.classpath, self.kwargs

    async def run(self) -> AsyncIterator[TriggerEvent]:
        loop = asyncio.get_running_loop()
        began = loop.time()
        for e in self.recording.events:
            wait = began + e.after - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            yield TriggerEvent(e.payload, checkpoint=e.checkpoint)


# -- the harness --------------------------------------------------------------------------


_template_lock = threading.Lock()
_template: Path | None = None


def _migrated_copy(directory: Path) -> str:
    """A migrated SQLite database in ``directory``: a copy of one migrated per process."""
    global _template
    with _template_lock:
        if _template is None or not _template.exists():
            folder = Path(tempfile.mkdtemp(prefix="tailrace-template-"))
            migrate_database(temporary_sqlite_url(folder))
            _template = folder / "tailrace.db"
    target = directory / "tailrace.db"
    shutil.copyfile(_template, target)
    return temporary_sqlite_url(directory)


class TimeSkippingHarness(RunQueries):
    """The DAGs of ``dags`` (a folder or one file) on a virtual clock that starts at
    ``start`` and skips ahead whenever everything waits.

    Use it as a context manager (it installs its clock as the process's clock, so task
    code, sensors and triggers see virtual time). ``database_url`` defaults to a fresh
    SQLite database in ``work_dir`` (a temporary directory unless given).
    """

    def __init__(
        self,
        dags: str | Path,
        *,
        start: datetime = DEFAULT_START,
        work_dir: str | Path | None = None,
        database_url: str | None = None,
        parallelism: int = 32,
    ) -> None:
        if start.tzinfo is None:
            raise ValueError("start must be an aware datetime (e.g. datetime(..., tzinfo=UTC))")
        dags = Path(dags).resolve()
        self.dags_folder = str(dags if dags.is_dir() else dags.parent)
        self._dag_files = list_dag_files(self.dags_folder) if dags.is_dir() else [str(dags)]
        self._own_dir = tempfile.mkdtemp(prefix="tailrace-timeskip-") if work_dir is None else None
        self.work_dir = Path(work_dir if work_dir is not None else self._own_dir or ".")
        self.log_folder = self.work_dir / "logs"
        self.clock = FakeClock(start)
        self.engine = create_engine(database_url or _migrated_copy(self.work_dir))
        self.executor = InlineExecutor()
        self.scheduler = Scheduler(
            self.engine,
            self.executor,
            log_folder=self.log_folder,
            parallelism=parallelism,
            clock=self.clock,
        )
        self.triggerer = Triggerer(
            self.engine,
            log_folder=str(self.log_folder),
            clock=self.clock,
            block_warning_seconds=None,
            safety_poll=False,
        )
        self.triggerer.on_events = self.scheduler.events_arrived
        self.triggerer.on_asset_events = self.scheduler.asset_events_arrived
        self.scheduler.on_triggers_changed = self.triggerer.wake
        self.scheduler.on_acks = self.triggerer.acks_arrived
        self._feeds: list[tuple[str, Callable[[dict[str, Any]], bool], EventRecording]] = []
        self.triggerer.runner.load_trigger = self._load_trigger
        self.loop: VirtualTimeLoop | None = None
        self._triggerer_task: asyncio.Task[None] | None = None
        self._installed: Any = None
        # Jumps of the clock and turns taken, for the curious and the benchmark.
        self.jumps = 0
        self.turns = 0

    # -- lifecycle -----------------------------------------------------------------------

    def __enter__(self) -> TimeSkippingHarness:
        # A poke-mode sensor between pokes holds its worker (here, the whole harness): the
        # clock moves on by the sleep, as it would have while it slept.
        self._installed = clock_module.installed(self.clock, self.clock.sleep)
        self._installed.__enter__()
        try:
            prepare_import_path(self.dags_folder)
            # Tasks render templates: import Jinja now, not during the first task's run.
            import tailrace.sdk._templating  # noqa: F401

            self.loop = VirtualTimeLoop(self.clock)
            started = threading.Event()
            self._triggerer_task = self.loop.create_task(self.triggerer.run(started))
            self.loop.run_until_idle()
            if not started.is_set():
                raise RuntimeError("the triggerer did not start on the virtual-time loop")
            self.scheduler.start()
            self.parse()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self._started_scheduler():
                self.scheduler.stop()
            loop, task = self.loop, self._triggerer_task
            if loop is not None and task is not None and not loop.is_closed():
                self.triggerer.stop()
                while not task.done():
                    loop.run_until_idle()
                loop.close()
            self.engine.dispose()
        finally:
            if self._installed is not None:
                self._installed.__exit__(None, None, None)
                self._installed = None
            if self._own_dir is not None:
                shutil.rmtree(self._own_dir, ignore_errors=True)

    def _started_scheduler(self) -> bool:
        return bool(self.scheduler.job_id)

    # -- DAGs and runs -------------------------------------------------------------------

    @property
    def now(self) -> datetime:
        return self.clock.now

    def parse(self) -> SyncReport:
        """Import the DAG files (in this process) and record their DAGs, unpaused."""
        results = [parse_file(path) for path in self._dag_files]
        with self.engine.begin() as conn:
            report = sync_parsed(
                conn, self.dags_folder, results, self.clock(), paused_at_creation=False
            )
        errors = [e for r in results for e in r.errors]
        if errors:
            raise AssertionError(
                "DAG files failed to import:\n"
                + "\n".join(f"{e.filename}: {e.message}" for e in errors)
            )
        self.scheduler.wake()
        return report

    def trigger(
        self,
        dag_id: str,
        conf: Mapping[str, Any] | None = None,
        *,
        logical_date: datetime | None = None,
    ) -> int:
        """Create a manual run (at the virtual now); returns its id."""
        pk, _ = trigger_dag_run(self.engine, dag_id, dict(conf or {}), logical_date=logical_date)
        self.scheduler.wake()
        return pk

    def feed(
        self,
        trigger: type[BaseTrigger] | str,
        recording: EventRecording,
        *,
        when: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        """Triggers of class ``trigger`` (a class, matched by name, or a classpath as the
        DAG serializes it), optionally only those whose kwargs ``when`` accepts, play
        ``recording`` instead of running: no network, the recording's timing."""
        classpath = trigger if isinstance(trigger, str) else trigger.__qualname__
        self._feeds.append((classpath, when or (lambda kwargs: True), recording))

    def _load_trigger(self, classpath: str, kwargs: dict[str, Any]) -> BaseTrigger:
        for fed, accepts, recording in self._feeds:
            if _same_class(fed, classpath) and accepts(kwargs):
                return RecordedTrigger(recording, classpath, kwargs)
        return load_trigger(classpath, kwargs)

    # -- driving -------------------------------------------------------------------------

    def run(self, dag_run_id: int, *, within: timedelta = timedelta(days=366)) -> dict[str, Any]:
        """Run until the run finishes (at most ``within`` of virtual time); its summary."""
        self.run_until(lambda: self._finished(dag_run_id), within=within)
        return self.summary(dag_run_id)

    def trigger_and_run(
        self, dag_id: str, conf: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> int:
        """Trigger a run, run it to its end; returns its id."""
        pk = self.trigger(dag_id, conf)
        self.run(pk, **kwargs)
        return pk

    def advance(self, span: timedelta) -> None:
        """Let ``span`` of virtual time pass, with everything that happens in it (the
        scheduled runs that fall due, their tasks, retries, triggers)."""
        end = self.clock.now + span
        self.run_until(lambda: False, within=span, stop_at=end)

    def run_until(
        self,
        done: Callable[[], bool],
        *,
        within: timedelta = timedelta(days=366),
        stop_at: datetime | None = None,
    ) -> None:
        """Take turns until ``done()``; jump the clock when everything waits.

        Raises :class:`StuckError` when nothing is left to happen, TimeoutError past
        ``within`` of virtual time. With ``stop_at``, returns when the clock reaches it.
        """
        deadline = self.clock.now + within
        turns_here = 0
        while True:
            self._turn()
            if done():
                return
            if self.scheduler.has_work or self.executor.pending:
                turns_here += 1
                if turns_here > _MAX_TURNS_AT_ONE_MOMENT:
                    raise StuckError(f"the scheduler keeps finding work at {self.now}")
                continue
            moment = self._next_moment()
            if stop_at is not None and (moment is None or moment > stop_at):
                self.clock.set(max(stop_at, self.clock.now))
                self._turn()
                return
            if moment is None:
                raise StuckError(
                    f"at {self.now.isoformat()} nothing is running and no timer is set, "
                    "but the condition still does not hold"
                )
            if moment > deadline:
                raise TimeoutError(
                    f"not done within {within} of virtual time (the next timer is at "
                    f"{moment.isoformat()})"
                )
            if moment > self.clock.now:
                self.clock.set(moment)
                self.jumps += 1
                turns_here = 0
            else:
                turns_here += 1
                if turns_here > _MAX_TURNS_AT_ONE_MOMENT:
                    raise StuckError(f"a timer keeps falling due at {self.now} without effect")

    def _turn(self) -> None:
        assert self.loop is not None, "use the harness as a context manager"
        self.turns += 1
        self.scheduler.step(0)
        self.executor.run_pending()
        self.loop.run_until_idle()
        task = self._triggerer_task
        if task is not None and task.done():
            task.result()  # the triggerer stopped: say why
            raise RuntimeError("the triggerer stopped")

    def _next_moment(self) -> datetime | None:
        assert self.loop is not None
        timers = [t for t in (self.scheduler.next_timer, self.loop.next_moment()) if t]
        return min(timers) if timers else None

    def _finished(self, dag_run_id: int) -> bool:
        with self.engine.connect() as conn:
            state = conn.scalar(select(DagRun.state).where(DagRun.id == dag_run_id))
        if state is None:
            raise LookupError(f"there is no DAG run with id {dag_run_id}")
        return state in FINISHED_RUN_STATES


def _same_class(fed: str, classpath: str) -> bool:
    # A class is matched by name: its stored classpath may name the package that exports
    # it, or (defined in a DAG file) a module name only the DAG loader knows.
    return fed == classpath or fed == classpath.rpartition(".")[2]
