"""Name, measure and move the trigger that blocks the event loop.

A ticker coroutine stamps the time every few tens of milliseconds. A thread watches the
stamp; when it goes stale past the threshold, the loop thread is stuck in some callback:
the loop's current task (else the frame whose ``self`` is a trigger we run) tells which
trigger. When the loop runs again, the gap between two stamps is the real stall, and the
warning names the trigger, its classpath, its task and that stall, in the triggerer's
log and the task's own. A trigger that blocks within one step of its generator a second
time, or once for five times the threshold, keeps blocking: at its next step the runner
starts it again, from its last checkpoint, on a thread of its own. Many quick steps in a
row are not blocking (the runner hands the loop back between them), and neither is a
step whose thread neither waited in a blocking call nor ran on the CPU: the machine gave
it no CPU, and the warning says it is overloaded instead. Neither is ever moved.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from tailrace import metrics

if TYPE_CHECKING:
    from tailrace.triggerer._runner import Running, TriggerRunner

log = logging.getLogger("tailrace.triggerer")
TICK = 0.02
# With no trigger running there is nothing to watch: the ticker sleeps until one starts,
# and the watching thread looks this rarely (an idle triggerer costs no CPU).
IDLE_TICK = 1.0
# One stall this many times the threshold is enough to move the trigger off the loop.
MOVE_AFTER_THRESHOLDS = 5
# A stall that goes on is reported again this often.
REPEAT_SECONDS = 10.0


@dataclass
class _Stall:
    since: float  # the ticker's last stamp before the loop stopped
    running: Running | None
    next_report: float
    steps: int = 0
    # Whether the trigger is still in the step of its generator it was in when the stall
    # was seen: a blocking call, not a busy stretch of many quick events.
    one_step: bool = True
    # The loop thread's CPU time when the stall was seen, and how often it was seen
    # waiting in a blocking call: a thread that did neither was waiting for a CPU.
    cpu: float | None = None
    samples: int = 0
    waits: int = 0
    # The verdict, while that step lasts: the trigger itself holds the loop.
    blocking: bool = False


class _ThreadProbe:
    """What a thread is doing, seen from another one: its CPU time and whether it waits
    in a blocking call (Linux; elsewhere unknown). Made on the thread it watches."""

    def __init__(self) -> None:
        self._stat = f"/proc/self/task/{threading.get_native_id()}/stat"
        try:
            self._clock: int | None = time.pthread_getcpuclockid(threading.get_ident())
        except (AttributeError, OSError):
            self._clock = None

    def cpu(self) -> float | None:
        if self._clock is None:
            return None
        try:
            return time.clock_gettime(self._clock)
        except OSError:
            # The watched thread has ended (its loop stopped): its clock is gone with it.
            return None

    def waiting(self) -> bool | None:
        try:
            with open(self._stat, encoding="ascii") as f:
                state = f.read().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            return None
        return state in ("S", "D")


class LoopWatchdog:
    def __init__(self, runner: TriggerRunner, threshold: float) -> None:
        self.runner = runner
        self.threshold = threshold
        self._stamp = time.monotonic()
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._probe: _ThreadProbe | None = None
        self._ticker: asyncio.Task[None] | None = None
        # Set while triggers run (the ticker ticks, the thread watches); clear when idle.
        self._active = threading.Event()
        self._trigger_started: asyncio.Event | None = None
        self.warnings: list[str] = []

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._probe = _ThreadProbe()
        self._stop.clear()
        self._stamp = time.monotonic()
        self._ticker = loop.create_task(self._tick(), name="triggerer-watchdog-tick")
        threading.Thread(target=self._watch, name="triggerer-watchdog", daemon=True).start()

    def trigger_started(self) -> None:
        """On the loop's thread, as a trigger starts: watch from now on (a fresh stamp
        first, so the time it was idle does not count as a stall)."""
        self._stamp = time.monotonic()
        self._active.set()
        if self._trigger_started is not None:
            self._trigger_started.set()

    def stop(self) -> None:
        self._stop.set()
        self._active.set()  # the watching thread leaves its idle wait
        if self._ticker is not None:
            self._ticker.cancel()

    @property
    def stamp(self) -> float:
        """When the loop last ran the ticker: it changes only while the loop is free."""
        return self._stamp

    async def _tick(self) -> None:
        self._trigger_started = started = asyncio.Event()
        while True:
            self._stamp = time.monotonic()
            if self.runner.running:
                self._active.set()
                await asyncio.sleep(TICK)
            else:
                self._active.clear()
                started.clear()
                await started.wait()

    def _watch(self) -> None:
        stall: _Stall | None = None
        while not self._stop.is_set():
            if stall is None and not self._active.is_set():
                self._active.wait(IDLE_TICK)
                continue
            if self._stop.wait(TICK):
                return
            stamp = self._stamp
            if stall is not None and stamp != stall.since:
                # The loop ran again: the ticker's next stamp came this much later than due.
                self._ended(stall, max(stamp - stall.since - TICK, 0.0))
                stall = None
            stuck = time.monotonic() - stamp - TICK
            if stall is None and stuck > self.threshold:
                culprit = self._culprit()
                steps = culprit.steps if culprit is not None else 0
                cpu = self._probe.cpu() if self._probe is not None else None
                stall = _Stall(stamp, culprit, stamp + REPEAT_SECONDS, steps, cpu=cpu)
            if stall is not None:
                self._going_on(stall, stuck)

    def _going_on(self, stall: _Stall, stuck: float) -> None:
        running = stall.running
        if running is not None and stall.one_step:
            if running.steps == stall.steps:
                stall.blocking = self._blocking(stall, stuck)
            else:  # that step is over: the verdict stands
                stall.one_step = False
        if running is not None and stall.blocking and not running.move_off_loop:
            running.move_off_loop = (
                running.blocks > 0 or stuck > MOVE_AFTER_THRESHOLDS * self.threshold
            )
        if time.monotonic() >= stall.next_report:
            stall.next_report += REPEAT_SECONDS
            self._warn(
                running,
                f"{self._blocker(running)} has been blocking the triggerer's "
                f"event loop for {stuck:.2f}s and still is: every other trigger waits",
            )

    def _blocking(self, stall: _Stall, stuck: float) -> bool:
        """Whether the trigger's step holds the loop: waiting in a blocking call or busy
        on the CPU, not a thread the machine is too loaded to run."""
        probe = self._probe
        cpu = probe.cpu() if probe is not None else None
        waiting = probe.waiting() if probe is not None else None
        if cpu is None or waiting is None or stall.cpu is None:
            return True  # nothing to tell them apart by
        stall.samples += 1
        stall.waits += waiting
        return stall.waits * 2 > stall.samples or (cpu - stall.cpu) * 2 > stuck

    def _ended(self, stall: _Stall, seconds: float) -> None:
        running = stall.running
        metrics.get().triggers_blocked_main_thread.inc()
        message = (
            f"{self._blocker(running)} has blocked the triggerer's event loop for "
            f"{seconds:.2f}s: every other trigger waited meanwhile."
        )
        if running is not None and not stall.blocking:
            message += " Its thread was waiting for a CPU: the machine is overloaded."
        elif running is not None:
            running.blocks += 1
            message += (
                " Triggers must await, never block — use asyncio.sleep, async clients, or "
                "asyncio.to_thread for blocking calls."
            )
            if running.move_off_loop:
                message += (
                    " It keeps blocking, so at its next step it starts again, from its last "
                    "checkpoint, on a thread of its own, where it delays only itself."
                )
        self._warn(running, message)

    def _blocker(self, running: Running | None) -> str:
        if running is None:
            return "code that is not a trigger we run"
        return f"trigger {running.trigger_id} ({running.classpath}) for {running.label}"

    def _warn(self, running: Running | None, message: str) -> None:
        log.warning(message)
        if running is not None and running.log_path is not None:
            stamp = datetime.now(UTC).isoformat(timespec="milliseconds")
            self.runner.router.write(
                running.log_path, f"[{stamp}] {{triggerer}} WARNING - {message}"
            )
        self.warnings.append(message)

    def _culprit(self) -> Running | None:
        from tailrace.sdk import BaseTrigger

        # A trigger moved to a loop of its own runs its code there: the shared loop only
        # does the runner's bookkeeping for it, and a stall there is not its doing.
        running = [r for r in list(self.runner.running.values()) if r.own_loop is None]
        # Read from this thread: the task the loop is in the middle of a step of.
        task = asyncio.current_task(self._loop) if self._loop is not None else None
        for candidate in running:
            if task is not None and candidate.task is task:
                return candidate
        # Blocked outside its task (a callback it scheduled): look for it on the stack.
        frame = sys._current_frames().get(self._loop_thread or -1)
        while frame is not None:
            self_ = frame.f_locals.get("self")
            if isinstance(self_, BaseTrigger):
                for candidate in running:
                    if candidate.trigger is self_:
                        return candidate
            frame = frame.f_back
        return None
