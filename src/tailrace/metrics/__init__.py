"""Prometheus metrics of every Tailrace process (ADR 0021).

Each component command (``standalone``, ``scheduler``, ``triggerer``, ``api-server``,
``worker``) owns a fresh directory for prometheus_client's multiprocess mode: it and the
processes it starts (local workers, the API child, Celery's pool) write their values
there, and whoever serves ``/metrics`` — the api-server, or the component's own
``metrics_port`` — reads them all. Call sites record through `get()`, which is a set of
no-op instruments while metrics are off (``metrics_enabled = false``), so the hot paths pay
one attribute look-up then.

Task-state metrics come from the transition hook (`tailrace.transitions.register_hook`),
never from another ``UPDATE`` site.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from tailrace.metrics._instruments import NOOP, PREFIX, Instruments

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine

    from tailrace.config import Settings

__all__ = [
    "CONTENT_TYPE",
    "DIRECTORY_VARIABLE",
    "PREFIX",
    "Instruments",
    "MetricsService",
    "activate",
    "activate_from_environment",
    "deactivate",
    "directory",
    "get",
    "render",
    "stream_acknowledged",
]

# prometheus_client's own variable: children started with this environment find it.
DIRECTORY_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_current: Instruments = cast(Instruments, NOOP)
_directory: Path | None = None
_unhook: Callable[[], None] | None = None
_lock = threading.Lock()


def get() -> Instruments:
    """The instruments to record with: live ones, or no-ops while metrics are off."""
    return _current


def directory() -> Path | None:
    """Where this process records (its component's directory), or None while off."""
    return _directory


def activate(path: str | Path, *, transition_hook: bool = True) -> Instruments:
    """Record into the directory ``path`` (prometheus_client's multiprocess mode) from now on in
    this process and in the processes it starts; with ``transition_hook``, count task
    finishes from the state machine's transitions (processes that change state: the
    scheduler, the API)."""
    global _current, _unhook, _directory
    from prometheus_client import values

    with _lock:
        _deactivate_locked()
        _directory = Path(path)
        os.environ[DIRECTORY_VARIABLE] = str(path)
        # prometheus_client picks its value class when first imported; choosing again
        # here makes activation independent of import order (and of earlier activations
        # in this process, each with its own files).
        values.ValueClass = values.MultiProcessValue()  # type: ignore[no-untyped-call]
        _current = Instruments()
        if transition_hook:
            from tailrace import transitions
            from tailrace.metrics._hook import TaskStateMetrics

            _unhook = transitions.register_hook(TaskStateMetrics(_current))
    return _current


def activate_from_environment(*, transition_hook: bool = False) -> bool:
    """In a process a component started (a worker, the API child): record into the
    component's directory if it has one. True if metrics are on here now."""
    path = os.environ.get(DIRECTORY_VARIABLE)
    if not path or not Path(path).is_dir():
        return False
    activate(path, transition_hook=transition_hook)
    return True


def deactivate() -> None:
    """Stop recording in this process (the instruments become no-ops again)."""
    with _lock:
        _deactivate_locked()


def _deactivate_locked() -> None:
    global _current, _unhook, _directory
    _directory = None
    if _unhook is not None:
        _unhook()
        _unhook = None
    if _current.enabled:
        from prometheus_client import values

        values.ValueClass = values.MutexValue
        # Close this process's files (they stay for the collector to read).
        values.close_all_multiprocess_files()  # type: ignore[no-untyped-call]
    _current = cast(Instruments, NOOP)


def stream_acknowledged(conn: Connection, trigger_id: int, after: int, upto: int) -> None:
    """A consumer acknowledged events ``after`` < index <= ``upto`` of a trigger, in
    ``conn``'s transaction: counted (with the oldest one's lag) when it commits."""
    m = _current
    if m.enabled:
        from tailrace.metrics._hook import stream_acknowledged as record

        record(m, conn, trigger_id, after, upto)


def render(path: str | Path, extra: Iterable[Any] = ()) -> bytes:
    """The text exposition of everything recorded in the directory ``path`` (all
    processes), and of ``extra`` collectors."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry(auto_describe=False)
    MultiProcessCollector(registry, path=str(path))  # type: ignore[no-untyped-call]
    for collector in extra:
        registry.register(collector)
    return generate_latest(registry)


@dataclass
class MetricsService:
    """A component's metrics: its directory, and its ``metrics_port`` when set.

    ``start()`` activates recording in this process (children inherit the directory);
    ``stop()`` ends it and removes the directory.
    """

    settings: Settings
    component: str
    engine: Engine | None = None
    directory: Path | None = field(init=False, default=None)
    port: int | None = field(init=False, default=None)
    _server: Any = field(init=False, default=None)
    _thread: threading.Thread | None = field(init=False, default=None)

    @property
    def enabled(self) -> bool:
        return self.settings.metrics_enabled

    def start(self, *, transition_hook: bool = True) -> None:
        if not self.enabled:
            return
        # A fresh directory per start: values of processes from an earlier start are gone.
        self.directory = Path(tempfile.mkdtemp(prefix=f"tailrace-metrics-{self.component}-"))
        activate(self.directory, transition_hook=transition_hook)
        if self.settings.metrics_port:
            self._serve(self.settings.metrics_host, self.settings.metrics_port)

    def _serve(self, host: str, port: int) -> None:
        from prometheus_client import CollectorRegistry, start_http_server
        from prometheus_client.multiprocess import MultiProcessCollector

        registry = CollectorRegistry(auto_describe=False)
        MultiProcessCollector(registry, path=str(self.directory))  # type: ignore[no-untyped-call]
        for collector in self.collectors():
            registry.register(collector)
        self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        self.port = self._server.server_port

    def collectors(self) -> list[Any]:
        """Values read from the database at scrape time: the api-server's alone (every
        component's port serving them would count each stream once per component)."""
        if self.engine is None or self.component not in ("api-server", "standalone"):
            return []
        from tailrace.metrics._collect import StreamCollector

        return [StreamCollector(self.engine)]

    def render(self) -> bytes:
        if self.directory is None:
            raise RuntimeError("metrics are off")
        return render(self.directory, self.collectors())

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.directory is not None:
            deactivate()
            os.environ.pop(DIRECTORY_VARIABLE, None)
            with contextlib.suppress(OSError):
                shutil.rmtree(self.directory)
            self.directory = None


@contextlib.contextmanager
def timed(observe: Callable[[float], None]) -> Iterator[None]:
    """Observe how long the block took, in seconds."""
    import time

    began = time.perf_counter()
    try:
        yield
    finally:
        observe(time.perf_counter() - began)
