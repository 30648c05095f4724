"""A scheduler's watch of the Celery workers' heartbeats, through a real broker: Celery's
own worker events, published here as a worker publishes them (ADR 0024)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from tailrace.config import load_settings
from tailrace.executors._worker_watch import WorkerWatch
from tailrace.executors.base import WorkerVerdict
from tailrace.executors.celery import celery_app
from tailrace.testing import wait_for

LOST_AFTER = 2.0


def _app(broker_url: str, tmp_path: Path) -> Any:
    settings = load_settings(
        {"TAILRACE_HOME": str(tmp_path), "TAILRACE_CELERY_BROKER_URL": broker_url}
    )
    return celery_app(settings)


def test_live_lost_and_offline_workers_as_the_broker_tells_them(
    broker_url: str, tmp_path: Path
) -> None:
    app = _app(broker_url, tmp_path)
    watch = WorkerWatch(app, LOST_AFTER)
    found = threading.Event()
    watch.on_lost = found.set
    watch.start()
    try:
        # No verdict before the watch has listened for a whole timeout.
        assert watch.verdict() is None
        first = wait_for(watch.verdict, timeout=30)
        assert first == WorkerVerdict(alive=frozenset(), lost={}, lost_after=LOST_AFTER)

        with app.connection_for_write() as conn:
            worker = app.events.Dispatcher(conn, hostname="tailrace-1@a", groups=["worker"])
            other = app.events.Dispatcher(conn, hostname="tailrace-2@b", groups=["worker"])

            def alive_with(*names: str) -> WorkerVerdict | None:
                worker.send("worker-heartbeat", freq=0.5)
                other.send("worker-heartbeat", freq=0.5)
                verdict = watch.verdict()
                return verdict if verdict and set(names) <= verdict.alive else None

            verdict = wait_for(lambda: alive_with("tailrace-1@a", "tailrace-2@b"), timeout=30)
            assert verdict.lost == {}

            # The second worker stops cleanly: lost at once, without waiting for silence.
            other.send("worker-offline")
            assert found.wait(30)
            verdict = wait_for(
                lambda: (v := watch.verdict()) and "tailrace-2@b" in v.lost and v, timeout=30
            )
            assert "tailrace-2@b" not in verdict.alive
            watch.handled(["tailrace-2@b"])

            # The first one goes silent (a kill -9): lost once the timeout passes.
            verdict = wait_for(
                lambda: (v := watch.verdict()) and "tailrace-1@a" in v.lost and v, timeout=30
            )
            assert "tailrace-1@a" not in verdict.alive
            watch.handled(["tailrace-1@a"])
            assert watch.verdict() == WorkerVerdict(
                alive=frozenset(), lost={}, lost_after=LOST_AFTER
            )

            # Heard again (it was only slow): alive again.
            verdict = wait_for(lambda: alive_with("tailrace-1@a"), timeout=30)
            assert verdict.lost == {}
            worker.close()
            other.close()
    finally:
        watch.stop()
