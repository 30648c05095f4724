"""A pool of pre-started worker processes on this machine.

One I/O thread owns every pipe: it hands workloads to idle workers, answers their XCom
requests, forwards their events and notices (through process sentinels) a worker that
died, failing its task and starting a replacement. No interpreter starts per task.

The I/O thread must not die of a fault: a pipe that breaks takes only its worker (a
workload it never started goes to another), a request the owner cannot answer fails only
the task that asked, and anything else restarts the loop. A loop that keeps failing
calls ``on_fatal`` rather than leave a scheduler heartbeating with no executor.
"""

from __future__ import annotations

import contextlib
import logging
import math
import multiprocessing
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path

import msgspec

from tailrace import metrics
from tailrace.clock import utcnow
from tailrace.execution import RunTask, TaskFinished, TaskStarted
from tailrace.execution._worker import worker_main
from tailrace.execution.protocol import (
    WORKER_REQUESTS,
    DagCallbackFinished,
    RunDagCallback,
    Shutdown,
    StreamItems,
    WorkerReply,
    Workload,
    decode_from_worker,
    encode,
)
from tailrace.executors.base import BaseExecutor, EventSink, XComSource

log = logging.getLogger(__name__)

# A task past its execution_timeout is first interrupted inside the worker (SIGALRM);
# if it is stuck in C code and ignores that, the process is killed after this grace.
HARD_TIMEOUT_GRACE = 10.0
# The I/O loop is restarted after a fault; this many within the window is fatal.
MAX_LOOP_FAULTS = 5
LOOP_FAULT_WINDOW = 60.0


@dataclass
class _Worker:
    process: BaseProcess
    conn: Connection
    job: Workload | None = None
    deadline: float | None = None
    busy_since: float = 0.0
    # The worker said it began the job (so its code may have run).
    started: bool = False
    # Why the owner killed it, for the task's error and log.
    failure: str | None = None


class LocalExecutor(BaseExecutor):
    def __init__(self, processes: int = 2, *, max_xcom_bytes: int = 1 << 20) -> None:
        self.processes = processes
        self.max_xcom_bytes = max_xcom_bytes
        self._ctx = multiprocessing.get_context("spawn")
        self._workers: list[_Worker] = []
        self._pending: deque[Workload] = deque()
        self._terminate: set[int] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        # Workloads handed back once after a worker died before beginning them.
        self._requeued: set[tuple[int, int]] = set()
        self.loop_faults = 0
        # How much worker time tasks took, and the most workers busy at once.
        self.busy_seconds = 0.0
        self.peak_busy = 0
        self._slots_reported: tuple[int, int, int] | None = None
        # Bumped when a worker is replaced: the I/O loop's poll set is rebuilt then.
        self._workers_version = 0

    # -- public API, called from the scheduler's thread ------------------------------

    def start(self, on_event: EventSink, xcom_source: XComSource) -> None:
        self._on_event = on_event
        self._xcom_source = xcom_source
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._workers = [self._spawn() for _ in range(self.processes)]
        self._thread = threading.Thread(target=self._supervise, name="local-executor", daemon=True)
        self._thread.start()

    def queue_workloads(self, workloads: Sequence[Workload], *, backlog: bool = False) -> None:
        # A local worker takes one try at a time from its pipe: none travel together.
        with self._lock:
            self._pending.extend(workloads)
        self._wake()

    def terminate(self, ti_ids: Sequence[int]) -> None:
        with self._lock:
            self._terminate.update(ti_ids)
            pending = [
                w for w in self._pending if _ti_id(w) is None or _ti_id(w) not in self._terminate
            ]
            self._pending = deque(pending)
        self._wake()

    def stop(self) -> None:
        self._stopping.set()
        self._wake()
        if self._thread is not None:
            self._thread.join(timeout=30)
        for w in self._workers:
            with contextlib.suppress(OSError):
                w.conn.send_bytes(encode(Shutdown()))
            # Nothing answers its requests any more: a try that asks one now (an XCom, a
            # Variable) ends at once, not when it is killed below (its report would go
            # unread either way). What was sent stays readable: an idle worker still
            # reads its Shutdown.
            w.conn.close()
        deadline = time.monotonic() + 5
        for w in self._workers:
            w.process.join(timeout=max(0.0, deadline - time.monotonic()))
            if w.process.is_alive():
                w.process.kill()
                w.process.join()
        self._wake_r.close()
        self._wake_w.close()

    @property
    def worker_pids(self) -> list[int | None]:
        return [w.process.pid for w in self._workers]

    # -- the I/O thread ----------------------------------------------------------------

    def _spawn(self) -> _Worker:
        parent, child = self._ctx.Pipe()
        process = self._ctx.Process(
            target=worker_main,
            args=(child, self.max_xcom_bytes),
            name="tailrace-worker",
            daemon=True,
        )
        process.start()
        child.close()
        return _Worker(process=process, conn=parent)

    def _wake(self) -> None:
        # BlockingIOError: already woken; OSError: shutting down.
        with contextlib.suppress(BlockingIOError, OSError):
            self._wake_w.send(b"x")

    def _dispatch(self) -> None:
        with self._lock:
            for w in self._workers:
                if not self._pending:
                    return
                if w.job is None and w.process.is_alive():
                    job = self._pending.popleft()
                    w.job = job
                    w.busy_since = time.monotonic()
                    self.peak_busy = max(
                        self.peak_busy, sum(1 for other in self._workers if other.job is not None)
                    )
                    timeout = job.execution_timeout if isinstance(job, RunTask) else None
                    w.deadline = (
                        time.monotonic() + timeout + HARD_TIMEOUT_GRACE if timeout else None
                    )
                    if not self._send(w, job):
                        # Its pipe broke: it died or is dying. The task never began there.
                        w.job = None
                        w.deadline = None
                        self._pending.appendleft(job)

    def _send(self, w: _Worker, message: Workload | WorkerReply) -> bool:
        """Send to a worker; a broken pipe ends that worker (its sentinel then fires)."""
        try:
            w.conn.send_bytes(encode(message))
        except (OSError, ValueError):  # ValueError: the pipe was closed
            self._kill(w)
            return False
        return True

    def _kill(self, w: _Worker, failure: str | None = None) -> None:
        if failure is not None and w.failure is None:
            w.failure = failure
        with contextlib.suppress(OSError):
            w.process.kill()

    def _supervise(self) -> None:
        faults: deque[float] = deque()
        while not self._stopping.is_set():
            try:
                self._io_loop()
            except Exception as exc:
                self.loop_faults += 1
                now = time.monotonic()
                faults.append(now)
                while faults[0] < now - LOOP_FAULT_WINDOW:
                    faults.popleft()
                if len(faults) >= MAX_LOOP_FAULTS:
                    log.critical("the local executor's I/O loop keeps failing", exc_info=True)
                    self.on_fatal(
                        f"the local executor's I/O loop failed {len(faults)} times in "
                        f"{LOOP_FAULT_WINDOW:.0f}s; last: {exc!r}"
                    )
                    return
                log.exception("the local executor's I/O loop failed; restarting it")

    def _io_loop(self) -> None:
        # One poll set for the loop's life, rebuilt only when a worker is replaced (a
        # selector built and filled per wait cost more than reading the message).
        version, poller, by_fd = -1, select.poll(), {}
        while not self._stopping.is_set():
            self._dispatch()
            self._report_slots()
            self._kill_overdue_and_terminated()
            if version != self._workers_version:
                version, poller, by_fd = self._workers_version, *self._poll_set()
            timeout = self._wait_timeout()
            ready = [
                by_fd[fd]
                for fd, _ in poller.poll(None if timeout is None else math.ceil(timeout * 1000))
            ]
            for kind, w in ready:
                if kind == "wake":
                    self._drain_wake()
                elif kind == "conn" and w is not None:
                    self._on_message(w)
            for kind, w in ready:
                if kind == "sentinel" and w is not None:
                    self._on_death(w)

    def _poll_set(self) -> tuple[select.poll, dict[int, tuple[str, _Worker | None]]]:
        poller = select.poll()
        by_fd: dict[int, tuple[str, _Worker | None]] = {self._wake_r.fileno(): ("wake", None)}
        for w in self._workers:
            by_fd[w.conn.fileno()] = ("conn", w)
            by_fd[w.process.sentinel] = ("sentinel", w)
        for fd in by_fd:
            poller.register(fd, select.POLLIN)
        return poller, by_fd

    def _report_slots(self) -> None:
        """Airflow's executor.open_slots, .queued_tasks and .running_tasks, when changed."""
        m = metrics.get()
        if not m.enabled:
            return
        with self._lock:
            running = sum(1 for w in self._workers if w.job is not None)
            slots = (len(self._workers) - running, len(self._pending), running)
        if slots != self._slots_reported:
            self._slots_reported = slots
            m.executor_open_slots.set(slots[0])
            m.executor_queued_tasks.set(slots[1])
            m.executor_running_tasks.set(slots[2])

    def _wait_timeout(self) -> float | None:
        deadlines = [w.deadline for w in self._workers if w.deadline is not None]
        return max(0.0, min(deadlines) - time.monotonic()) if deadlines else None

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass

    def _on_message(self, w: _Worker) -> None:
        try:
            msg = decode_from_worker(w.conn.recv_bytes())
        except (EOFError, OSError):
            self._kill(w)  # the sentinel reports the death
            return
        except msgspec.DecodeError as exc:
            self._kill(w, f"the worker sent a message its owner cannot read ({exc})")
            return
        if isinstance(msg, WORKER_REQUESTS):
            try:
                reply = self._xcom_source(msg)
            except Exception as exc:
                log.exception("answering a worker's %s failed", type(msg).__name__)
                self._kill(w, f"the owner could not answer the task's {type(msg).__name__}: {exc}")
                return
            self._send(w, reply)
        elif isinstance(msg, TaskStarted | StreamItems):
            if isinstance(msg, TaskStarted):
                w.started = True
            self._on_event(msg)
        elif isinstance(msg, TaskFinished | DagCallbackFinished):
            self._release(w)
            self._on_event(msg)

    def _release(self, w: _Worker) -> None:
        self.busy_seconds += time.monotonic() - w.busy_since
        w.job = None
        w.deadline = None
        w.started = False

    def _kill_overdue_and_terminated(self) -> None:
        now = time.monotonic()
        with self._lock:
            doomed = self._terminate
            self._terminate = set()
        for w in self._workers:
            if w.job is None:
                continue
            if _ti_id(w.job) in doomed:
                self._kill(w, "the task was cleared or marked, or its run timed out, while it ran")
            elif w.deadline is not None and now >= w.deadline:
                timeout = w.job.execution_timeout if isinstance(w.job, RunTask) else 0.0
                self._kill(
                    w,
                    f"the task ignored its execution_timeout of {timeout or 0:g}s "
                    f"for {HARD_TIMEOUT_GRACE:g}s more",
                )

    def _on_death(self, w: _Worker) -> None:
        w.process.join()
        code = w.process.exitcode
        if isinstance(w.job, RunDagCallback):
            self._callback_died(w, w.job, code)
        if isinstance(w.job, RunTask) and not w.started and w.failure is None:
            job = w.job
            key = (job.ti_id, job.try_number)
            if key not in self._requeued:
                # It died before beginning the job (between tasks, say): no task code ran,
                # so the job goes to another worker instead of failing an innocent try.
                self._requeued.add(key)
                self._release(w)
                with self._lock:
                    self._pending.appendleft(job)
        if isinstance(w.job, RunTask):
            job = w.job
            self._requeued.discard((job.ti_id, job.try_number))
            self._release(w)
            log.warning(
                "worker pid %s died (exit code %s) while running %s.%s",
                w.process.pid,
                code,
                job.dag_id,
                job.task_id,
            )
            cause = (
                f"its owner stopped it: {w.failure}"
                if w.failure is not None
                else "it was killed or crashed"
            )
            error = (
                f"the worker process (pid {w.process.pid}) running this task died with exit "
                f"code {code}: {cause}"
            )
            _append_to_log(job.log_path, error)
            self._on_event(
                TaskFinished(
                    ti_id=job.ti_id,
                    try_number=job.try_number,
                    outcome="failed",
                    start_date=None,
                    end_date=utcnow(),
                    error=error,
                )
            )
        index = self._workers.index(w)
        w.conn.close()
        if not self._stopping.is_set():
            self._workers[index] = self._spawn()
        self._workers_version += 1

    def _callback_died(self, w: _Worker, job: RunDagCallback, code: int | None) -> None:
        self._release(w)
        error = (
            f"the worker process (pid {w.process.pid}) running the DAG callback died with "
            f"exit code {code}"
        )
        log.warning("%s (DAG %s, run %s)", error, job.dag_id, job.dag_run.run_id)
        _append_to_log(job.log_path, error)
        self._on_event(DagCallbackFinished(callback_id=job.callback_id, ok=False, error=error))


def _ti_id(workload: Workload) -> int | None:
    return workload.ti_id if isinstance(workload, RunTask) else None


def _append_to_log(path: str, message: str) -> None:
    """The worker cannot say it died: its owner writes that into the try's log."""
    stamp = utcnow().isoformat(timespec="milliseconds")
    with contextlib.suppress(OSError):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as log_file:
            log_file.write(f"[{stamp}] {{executor}} ERROR - {message}\n")
