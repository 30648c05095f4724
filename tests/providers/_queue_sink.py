"""The exactly-once scenario every queue trigger passes: a task consumes the queue into a
PostgreSQL sink keyed by message id while the triggerer holding the trigger is killed
with -9 mid-stream; the sink must hold each message once, no handler may have seen one
twice, and the queue must be drained."""

from __future__ import annotations

import os
import signal
import textwrap
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine, select

from tailrace.db.models import Job, Trigger
from tailrace.testing import component_env, run_cli, start_component, stop_component, wait_for

from .test_redis_streams import _counts


@dataclass(frozen=True)
class QueueUnderTest:
    dag_id: str
    dag_source: str  # a DAG file consuming the queue into the sink
    env: dict[str, str]  # the connection the trigger names
    publish: Callable[[int, int], None]  # messages n .. n + count - 1 (body str(n))
    drained: Callable[[], bool]  # nothing unread, unacknowledged or in flight
    # Rows are in the sink, and messages delivered but not yet acknowledged.
    in_flight: Callable[[], bool]


def kill_the_triggerer_mid_stream(
    queue: QueueUnderTest,
    *,
    database_url: str,
    dags_folder: Path,
    engine: Engine,
    sink: Engine,
    total: int = 6000,
) -> None:
    (dags_folder / f"{queue.dag_id}.py").write_text(textwrap.dedent(queue.dag_source))
    env = component_env(
        database_url,
        dags_folder,
        worker_processes=2,
        trigger_lease_seconds=2,
        scheduler_poll_interval=0.5,
    )
    env.update(queue.env)
    scheduler = start_component(env, "scheduler")
    triggerers = [start_component(env, "triggerer") for _ in range(2)]
    try:
        assert run_cli(env, "dags", "trigger", queue.dag_id).returncode == 0

        def holder() -> int | None:
            with engine.connect() as conn:
                return conn.scalar(
                    select(Job.pid)
                    .join(Trigger, Trigger.triggerer_job_id == Job.id)
                    .where(Trigger.completed.is_(False))
                )

        victim_pid = wait_for(holder, timeout=60)
        queue.publish(0, total // 2)
        publisher = threading.Thread(target=queue.publish, args=(total // 2, total // 2))
        publisher.start()
        # The kill falls between "committed" and "acknowledged" for some messages.
        wait_for(lambda: (_counts(sink)[0] >= total // 10 and queue.in_flight()) or None, 60)
        victim = next(p for p in triggerers if p.pid == victim_pid)
        os.kill(victim_pid, signal.SIGKILL)
        victim.wait()
        publisher.join()
        survivor = next(p for p in triggerers if p is not victim)
        wait_for(lambda: holder() == survivor.pid or None, timeout=60)
        wait_for(lambda: (_counts(sink)[0] == total and queue.drained()) or None, timeout=180)
        rows, distinct, attempts = _counts(sink)
        assert (rows, distinct) == (total, total)
        # Nothing was handled twice: the redelivered messages were recognised and dropped.
        assert attempts == total
    finally:
        for proc in [scheduler, *triggerers]:
            stop_component(proc)
