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

import pytest
from sqlalchemy import Engine, select, text

from tailrace.db.models import Job, Trigger
from tailrace.testing import component_env, run_cli, start_component, stop_component, wait_for


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def _unavailable(reason: str) -> None:
    if _in_ci():
        pytest.fail(f"required in CI (CI=true): {reason}")
    pytest.skip(reason)


def _counts(sink: Engine) -> tuple[int, int, int]:
    """Rows in the sink, distinct message numbers among them, and handler attempts."""
    with sink.connect() as conn:
        rows = conn.scalar(text("SELECT count(*) FROM sink")) or 0
        distinct = conn.scalar(text("SELECT count(DISTINCT n) FROM sink")) or 0
        attempts = conn.scalar(text("SELECT count(*) FROM attempts")) or 0
    return rows, distinct, attempts


def _sink_dsn(sink: Engine) -> str:
    return sink.url.set(drivername="postgresql").render_as_string(hide_password=False)


_CONSUMER = """
from datetime import datetime
import psycopg
from tailrace import BaseOperator, dag
{imports}

SINK = {sink!r}


class ToSink(BaseOperator):
    def execute(self, context):
        self.defer(trigger={trigger}, method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):
        rows = [(e.payload["id"], {number}) for e in events]
        with psycopg.connect(SINK) as conn:
            conn.cursor().executemany(
                "INSERT INTO sink (id, n) VALUES (%s, %s) ON CONFLICT DO NOTHING", rows
            )
            ids = [(i,) for i, _ in rows]
            conn.cursor().executemany("INSERT INTO attempts (id) VALUES (%s)", ids)


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def {dag_id}():
    ToSink(task_id="to_sink", max_batch_size=500, max_batch_latency=0.05, max_pending_events=2000)


{dag_id}()
"""


def consumer_dag(
    dag_id: str, sink: Engine, *, imports: str, trigger: str, number: str = 'int(e.payload["body"])'
) -> str:
    """A DAG whose one task handles the events of ``trigger`` (a Python expression, its
    class imported by ``imports``) in batches into ``sink``: each message's id and the
    number its body carries (``number``, an expression of the event ``e``)."""
    return _CONSUMER.format(
        dag_id=dag_id, sink=_sink_dsn(sink), imports=imports, trigger=trigger, number=number
    )


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
