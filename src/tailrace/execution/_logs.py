"""Per-try task log files: every line the task logs or prints lands in one file."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import io
import logging
import os
import queue
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

LOG_FORMAT = "[%(asctime)s] {%(filename)s:%(lineno)d} %(levelname)s - %(message)s"
# With tracing on, each line ends with the trace and span it was logged in (the names are
# OpenTelemetry's logging instrumentation's, so log tools that know them correlate).
TRACED_LOG_FORMAT = LOG_FORMAT + " [trace_id=%(otelTraceID)s span_id=%(otelSpanID)s]"


class TraceIds(logging.Filter):
    """Puts the current span's trace and span ids on each record (zeros outside a span)."""

    def filter(self, record: logging.LogRecord) -> bool:
        from opentelemetry import trace

        span = trace.get_current_span().get_span_context()
        record.otelTraceID = f"{span.trace_id:032x}"
        record.otelSpanID = f"{span.span_id:016x}"
        return True


class _LineWriter(io.TextIOBase):
    """A file-like object that sends whole printed lines to a logger."""

    def __init__(self, logger: logging.Logger, level: int) -> None:
        self._logger = logger
        self._level = level
        self._buffer = ""

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        self._buffer += s
        *lines, self._buffer = self._buffer.split("\n")
        for line in lines:
            # stacklevel=2 names the line that printed, not this writer.
            self._logger.log(self._level, line, stacklevel=2)
        return len(s)

    def flush(self) -> None:
        if self._buffer:
            self._logger.log(self._level, self._buffer)
            self._buffer = ""


# Most filesystems (ext4, XFS, btrfs, tmpfs, APFS) refuse a file name over 255 bytes.
NAME_MAX_BYTES = 255
_DIGEST_CHARS = 16


@functools.lru_cache(maxsize=4096)  # the scheduler asks for the same ids many times a second
def path_part(key: str, value: str) -> str:
    """``key=value`` as one directory name: unchanged when it fits NAME_MAX_BYTES, else the
    longest prefix of ``value`` that fits with ``~`` and a hash of the whole value (a value
    the filesystem cannot encode at all is hashed too)."""
    part = f"{key}={value}"
    if _fits(part):
        return part
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST_CHARS]
    room = NAME_MAX_BYTES - len(f"{key}=~{digest}")
    # Cut at a character boundary; lone surrogates (which no file name holds) are dropped.
    prefix = value.encode("utf-8", "surrogatepass")[:room].decode("utf-8", errors="ignore")
    return f"{key}={prefix}~{digest}"


def _fits(name: str) -> bool:
    try:
        return len(os.fsencode(name)) <= NAME_MAX_BYTES
    except UnicodeError:
        return False


def log_path_for(
    log_folder: str | Path, dag_id: str, run_id: str, task_id: str, map_index: int, try_number: int
) -> Path:
    """Where a try's log lives; every part fits a file name however long the ids."""
    path = (
        Path(log_folder)
        / path_part("dag_id", dag_id)
        / path_part("run_id", run_id)
        / path_part("task_id", task_id)
    )
    if map_index >= 0:
        path /= f"map_index={map_index}"
    return path / f"attempt={try_number}.log"


def dag_callback_log_path(log_folder: str | Path, dag_id: str, run_id: str, kind: str) -> Path:
    """Where a run's DAG callback (``kind``: success or failure) logs."""
    return (
        Path(log_folder)
        / path_part("dag_id", dag_id)
        / path_part("run_id", run_id)
        / f"dag_on_{kind}_callback.log"
    )


# A try's first lines are held in memory this long before its log file is created: a
# short task then reports its result first and writes its file after, off the critical
# path (creating a directory and a file costs about a millisecond on common disks).
LIVE_AFTER_SECONDS = 0.05
_PLAIN = logging.Formatter(LOG_FORMAT)
_TRACED = logging.Formatter(TRACED_LOG_FORMAT)
_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC


class _GoLive:
    """One thread per process makes each try's log live ``LIVE_AFTER_SECONDS`` after it
    began (a timer thread per try cost a no-op task a fifth of its worker CPU). It sleeps
    until the oldest waiting try's time and is only woken when it had none."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        # Handlers in the order they began, so each one's time is no earlier than the
        # one's before it.
        self._waiting: dict[TryLogHandler, float] = {}
        self._thread: threading.Thread | None = None
        self._idle = False

    def add(self, handler: TryLogHandler) -> None:
        with self._cond:
            self._waiting[handler] = time.monotonic() + LIVE_AFTER_SECONDS
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="task-log", daemon=True)
                self._thread.start()
            elif self._idle:
                self._cond.notify()

    def discard(self, handler: TryLogHandler) -> None:
        with self._cond:
            self._waiting.pop(handler, None)

    def reset_after_fork(self) -> None:
        # The child has no such thread, and the lock may have been held when it forked.
        self.__init__()  # type: ignore[misc]

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._waiting:
                    self._idle = True
                    self._cond.wait()
                self._idle = False
                handler, at = next(iter(self._waiting.items()))
                delay = at - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)  # a try that ends meanwhile leaves the dict
                    continue
                del self._waiting[handler]
            handler.go_live()


_go_live = _GoLive()
os.register_at_fork(after_in_child=_go_live.reset_after_fork)


# Files a process's log thread may owe at once: past that, the worker makes the next one
# itself (a disk slower than the tries holds them back, and the logs trail only so far).
MAX_FILES_OWED = 256


class _Finisher:
    """One thread per process makes the log files of tries that ended, reported, before
    their file was made: the worker takes its next try meanwhile. On a slow disk a
    directory and a file cost up to a millisecond, more than a no-op try's own work."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[TryLogHandler | threading.Event] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._owed: Counter[str] = Counter()  # path -> files queued for it

    def close(self, handler: TryLogHandler) -> None:
        """Close ``handler`` here, or on the thread when its file is still to be made."""
        with self._lock:
            later = handler.file_to_make() and self._owed.total() < MAX_FILES_OWED
            if later:
                self._owed[handler.path] += 1
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="task-log-end", daemon=True
                    )
                    self._thread.start()
        if not later:
            handler.close()  # its file is open (closing costs nothing), or too many are owed
            return
        _go_live.discard(handler)
        self._queue.put(handler)

    def drain(self, path: str | None = None, timeout: float = 30.0) -> None:
        """Wait until every file queued (or, with ``path``, that one's) is written."""
        with self._lock:
            if self._thread is None or (path is not None and path not in self._owed):
                return
        done = threading.Event()
        self._queue.put(done)
        done.wait(timeout)

    def reset_after_fork(self) -> None:
        self.__init__()  # type: ignore[misc]

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if isinstance(item, threading.Event):
                item.set()
                continue
            try:
                item.close()
            except Exception as exc:  # the next tries' files must still be made
                _tell_stderr(f"cannot finish the log {item.path}: {exc!r}")
            finally:
                with self._lock:
                    self._owed[item.path] -= 1
                    if not self._owed[item.path]:
                        del self._owed[item.path]


_finisher = _Finisher()
os.register_at_fork(after_in_child=_finisher.reset_after_fork)


def _tell_stderr(message: str) -> None:
    """A fault of the log itself, on the process's own stderr (a task's is redirected)."""
    stderr = sys.__stderr__
    if stderr is not None:
        with contextlib.suppress(OSError, ValueError):
            stderr.write(f"tailrace: {message}\n")
            stderr.flush()


class TryLogHandler(logging.Handler):
    """Writes one try's log file; buffers until the try has run ``LIVE_AFTER_SECONDS``.

    A file that cannot be created or written (a full disk, a read-only or misconfigured
    log folder) never raises into the task or its worker: the handler says so once on the
    process's stderr, with the path and the error, and drops the rest of the try's lines.
    """

    def __init__(self, path: str) -> None:
        super().__init__()
        self.formatter = _PLAIN
        self._path = path
        self._buffer: list[str] = []
        # The file, opened for appending: one write(2) per line, no buffer to flush.
        self._fd: int | None = None
        self._broken = False
        # How many of the held lines' bytes reached the log's owner another way (a remote
        # worker ships them with its reports): when that is all of them at the end, no
        # file is written.
        self._delivered = 0
        # Set in the try's thread once its result is reported: its file may be made after
        # the try's block exits, on this process's log thread.
        self.finish_later = False
        _go_live.add(self)

    @property
    def path(self) -> str:
        return self._path

    def emit(self, record: logging.LogRecord) -> None:
        line = self.format(record) + "\n"
        if self._broken:
            return
        if self._fd is None:
            self._buffer.append(line)
            return
        try:
            _write(self._fd, line)
        except OSError as exc:
            self._give_up(exc)

    def go_live(self) -> None:
        """Create the file, write what was buffered, and write through from now on."""
        with self.lock:  # type: ignore[union-attr]
            if self._fd is not None or self._broken:
                return
            try:
                folder = os.path.dirname(self._path)
                if folder:
                    os.makedirs(folder, exist_ok=True)
                self._fd = os.open(self._path, _APPEND, 0o666)
                _write(self._fd, "".join(self._buffer))
            except OSError as exc:
                self._give_up(exc)
            self._buffer.clear()

    def file_to_make(self) -> bool:
        """Whether its file is still to be made (its lines are held in memory)."""
        return self._fd is None and not self._broken

    def held(self) -> str | None:
        """The lines held in memory, before the file is created (None once it is)."""
        with self.lock:  # type: ignore[union-attr]
            return None if self._fd is not None or self._broken else "".join(self._buffer)

    def _held_bytes(self) -> int:
        return sum(len(line.encode("utf-8")) for line in self._buffer)

    def delivered(self, upto: int) -> None:
        with self.lock:  # type: ignore[union-attr]
            self._delivered = upto

    def _give_up(self, exc: OSError) -> None:
        self._broken = True
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
        _tell_stderr(
            f"cannot write the task log {self._path}: {exc.strerror or exc}; the rest of this "
            "try's log is dropped (check log_folder: TAILRACE_LOG_FOLDER)"
        )

    def close(self) -> None:
        _go_live.discard(self)
        with self.lock:  # type: ignore[union-attr]
            # Every held line went with a report: no file, and (as after any close) no
            # line from another thread after this check lands anywhere.
            if self._fd is None and self._delivered and self._held_bytes() == self._delivered:
                self._broken = True
        self.go_live()
        with self.lock:  # type: ignore[union-attr]
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._fd)
                self._fd = None
            # logging.shutdown() closes every handler again when the worker exits: that
            # must not create the file anew (`db clean` may have removed it meanwhile).
            self._broken = True
        super().close()


def _write(fd: int, text: str) -> None:
    data = text.encode("utf-8")
    while data:
        data = data[os.write(fd, data) :]


_capturing: contextvars.ContextVar[TryLogHandler | None] = contextvars.ContextVar(
    "tailrace_try_log", default=None
)


def held_log_lines() -> bytes | None:
    """In a try's own thread: its log's lines while they are held in memory, before its
    file exists (they will be the file's first bytes); None once they are in the file."""
    handler = _capturing.get()
    held = handler.held() if handler is not None else None
    return held.encode("utf-8") if held is not None else None


def finish_log_later() -> None:
    """In a try's own thread, once its result is reported and nothing else will append to
    its log (it did not defer): a file not made yet is made on this process's log thread
    after the try's block exits, while the worker takes its next try. Call
    ``drain_task_logs`` before the process exits."""
    handler = _capturing.get()
    if handler is not None:
        handler.finish_later = True


def drain_task_logs() -> None:
    """Wait until the log files of this process's ended tries are all written."""
    _finisher.drain()


def held_log_lines_delivered(upto: int) -> None:
    """In a try's own thread: the first ``upto`` bytes of its held lines reached the log's
    owner (a remote worker's report carried them). If the try logs nothing more, its file
    is never written: a remote worker's spool of a short try costs no disk."""
    handler = _capturing.get()
    if handler is not None:
        handler.delivered(upto)


@contextlib.contextmanager
def capture_task_logs(path: str, *, traced: bool = False) -> Iterator[logging.Logger]:
    """Route the root logger, stdout and stderr into ``path`` for the duration of a try
    (``traced``: each line carries its trace and span ids).

    The file is complete once the block exits (but see ``finish_log_later``); lines
    written in the block's first ``LIVE_AFTER_SECONDS`` may reach it only then.
    """
    # A stint of the same try this process ended just before (its file still to be made)
    # goes first: the file's lines stay in order.
    _finisher.drain(path)
    handler = TryLogHandler(path)
    if traced:
        handler.formatter = _TRACED
        handler.addFilter(TraceIds())
    root = logging.getLogger()
    previous_level = root.level
    root.addHandler(handler)
    if previous_level != logging.INFO:  # setLevel clears every logger's level cache
        root.setLevel(logging.INFO)
    task_logger = logging.getLogger("tailrace.task")
    stdout = _LineWriter(logging.getLogger("tailrace.task.stdout"), logging.INFO)
    stderr = _LineWriter(logging.getLogger("tailrace.task.stderr"), logging.WARNING)
    capturing = _capturing.set(handler)
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            yield task_logger
    finally:
        _capturing.reset(capturing)
        stdout.flush()
        stderr.flush()
        root.removeHandler(handler)
        if root.level != previous_level:
            root.setLevel(previous_level)
        if handler.finish_later:
            _finisher.close(handler)
        else:
            handler.close()
