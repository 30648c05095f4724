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

from tailrace.config import load_settings
from tailrace.db.models import DagRun, Job, TaskInstance, Trigger
from tailrace.store import dead_letters
from tailrace.testing import (
    DagHarness,
    component_env,
    run_cli,
    start_component,
    stop_component,
    wait_for,
)


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
{hold}


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
        hold(rows)


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def {dag_id}():
    ToSink(
        task_id="to_sink",
        max_batch_size=500,
        max_batch_latency=0.05,
        max_pending_events=2000,
        # A try lost with its worker resumes after the last acknowledged batch.
        retries=3,
        retry_delay=0,
        stream_retry="resume",
    )


{dag_id}()
"""


_NO_HOLD = """
def hold(rows):
    pass
"""

# After its rows are in the sink, and before the batch is acknowledged, the handler of the
# batch holding message number AT waits for the file <name>.go beside the DAG, having
# written its pid to <name>.held: a kill then lands between "handled" and "committed".
_HOLDS = """
import os, time
from pathlib import Path

HERE = Path(__file__).parent


def hold(rows):
    numbers = {{n for _, n in rows}}
    for at, name in {holds!r}:
        if at in numbers and not (HERE / f"{{name}}.go").exists():
            (HERE / f"{{name}}.held").write_text(str(os.getpid()))
            while not (HERE / f"{{name}}.go").exists():
                time.sleep(0.02)
"""


def consumer_dag(
    dag_id: str,
    sink: Engine,
    *,
    imports: str,
    trigger: str,
    number: str = 'int(e.payload["body"])',
    holds: tuple[tuple[int, str], ...] = (),
) -> str:
    """A DAG whose one task handles the events of ``trigger`` (a Python expression, its
    class imported by ``imports``) in batches into ``sink``: each message's id and the
    number its body carries (``number``, an expression of the event ``e``); ``holds``
    stop the handler of the batch holding a message number (see ``_HOLDS``)."""
    hold = _HOLDS.format(holds=holds) if holds else _NO_HOLD
    return _CONSUMER.format(
        dag_id=dag_id,
        sink=_sink_dsn(sink),
        imports=imports,
        trigger=trigger,
        number=number,
        hold=hold,
    )


_POISONED = """
from datetime import datetime
import psycopg
from tailrace import BaseOperator, dag
{imports}

SINK = {sink!r}


class ToSink(BaseOperator):
    def execute(self, context):
        self.defer(trigger={trigger}, method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):
        if any({number} == "poison" for e in events):
            raise ValueError("cannot handle a poison entry")
        rows = [(e.payload["id"], int({number})) for e in events]
        with psycopg.connect(SINK) as conn:
            conn.cursor().executemany(
                "INSERT INTO sink (id, n) VALUES (%s, %s) ON CONFLICT DO NOTHING", rows
            )


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def {dag_id}():
    ToSink(task_id="to_sink", max_batch_size=10, max_batch_latency=0.05, retries=1,
           retry_delay=0, stream_retry="dead_letter")


{dag_id}()
"""


def poisoned_dag(dag_id: str, sink: Engine, *, imports: str, trigger: str, number: str) -> str:
    """A DAG whose one task handles ``trigger``'s events in batches of 10 into ``sink``,
    except that a batch holding a message whose number (``number``, an expression of the
    event ``e``) is "poison" fails every try: it goes to the dead letters."""
    return _POISONED.format(
        dag_id=dag_id, sink=_sink_dsn(sink), imports=imports, trigger=trigger, number=number
    )


def wait_for_dead_letters(
    harness: DagHarness, sink: Engine, published: int, drained: Callable[[], bool], timeout: float
) -> None:
    """Until some messages are dead letters, the sink holds every other one of the
    ``published``, and the broker has nothing left (``drained``)."""

    def settled() -> bool:
        with harness.engine.connect() as conn:
            dead = len(dead_letters.list_letters(conn))
        return dead > 0 and _counts(sink)[0] + dead == published and drained()

    wait_for(lambda: settled() or None, timeout=timeout)


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
    logs = [dags_folder.parent / f"triggerer-{i}.log" for i in range(2)]
    triggerers = [start_component(env, "triggerer", output=log) for log in logs]
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
        try:
            wait_for(lambda: (_counts(sink)[0] == total and queue.drained()) or None, 180)
        except AssertionError as exc:
            survivor_log = logs[triggerers.index(survivor)].read_text().splitlines()[-20:]
            raise AssertionError(
                f"{exc}: {_where_it_stands(queue, engine, sink)}; the survivor's log ends:\n"
                + "\n".join(survivor_log)
            ) from None
        rows, distinct, attempts = _counts(sink)
        assert (rows, distinct) == (total, total)
        # Nothing was handled twice: the redelivered messages were recognised and dropped.
        assert attempts == total
    finally:
        for proc in [scheduler, *triggerers]:
            stop_component(proc)


def _where_it_stands(queue: QueueUnderTest, engine: Engine, sink: Engine) -> str:
    """What a stalled exactly-once scenario shows: the sink, the broker, the triggers."""
    rows, distinct, attempts = _counts(sink)
    with engine.connect() as conn:
        triggers = conn.execute(
            select(Trigger.id, Trigger.completed, Trigger.triggerer_job_id)
        ).all()
        states = conn.execute(select(TaskInstance.task_id, TaskInstance.state)).all()
    return (
        f"sink rows {rows}, distinct {distinct}, handler attempts {attempts}; "
        f"broker drained {queue.drained()}, in flight {queue.in_flight()}; "
        f"triggers {triggers}; task instances {states}"
    )


def pause_ends_the_stream(
    queue: QueueUnderTest,
    *,
    database_url: str,
    dags_folder: Path,
    engine: Engine,
    sink: Engine,
    total: int = 2000,
) -> None:
    """`tailrace dags pause` mid-stream: the trigger stops pulling, what it pulled is
    handled and acknowledged to the broker, and the run ends; a new run after the
    unpause reads on from there, nothing handled twice."""
    (dags_folder / f"{queue.dag_id}.py").write_text(textwrap.dedent(queue.dag_source))
    env = component_env(database_url, dags_folder, worker_processes=2)
    env.update(queue.env)
    procs = [start_component(env, "scheduler"), start_component(env, "triggerer")]
    try:
        # New DAGs start paused, and a manual run of a paused DAG streams on: it is the
        # pause while it runs that ends it.
        assert run_cli(env, "dags", "unpause", queue.dag_id).returncode == 0
        assert run_cli(env, "dags", "trigger", queue.dag_id).returncode == 0
        queue.publish(0, total // 2)
        wait_for(lambda: _counts(sink)[0] == total // 2 or None, timeout=90)
        paused = run_cli(env, "dags", "pause", queue.dag_id)
        assert paused.returncode == 0, paused.stderr
        assert wait_for(lambda: _run_states(engine, queue.dag_id), timeout=60) == ["success"]
        # Acknowledged before the connection closed: nothing waits for a redelivery.
        wait_for(lambda: queue.drained() or None, timeout=30)
        assert _counts(sink) == (total // 2, total // 2, total // 2)
        (log,) = load_settings(env).log_folder.rglob("attempt=1.log")
        assert "the DAG was paused" in log.read_text()

        queue.publish(total // 2, total // 2)
        assert run_cli(env, "dags", "unpause", queue.dag_id).returncode == 0
        assert run_cli(env, "dags", "trigger", queue.dag_id).returncode == 0
        wait_for(lambda: (_counts(sink)[0] == total and queue.drained()) or None, timeout=90)
        assert _counts(sink) == (total, total, total)
    finally:
        for proc in procs:
            stop_component(proc)


def _run_states(engine: Engine, dag_id: str) -> list[str] | None:
    with engine.connect() as conn:
        states = list(conn.scalars(select(DagRun.state).where(DagRun.dag_id == dag_id)))
    return states if states and all(s in ("success", "failed") for s in states) else None


def _consumer_running(engine: Engine, dag_id: str) -> bool:
    with engine.connect() as conn:
        state = conn.scalar(select(TaskInstance.state).where(TaskInstance.dag_id == dag_id))
    return state == "running"


# Where kill_the_scheduler_and_a_worker_mid_stream's handler waits to be killed.
HOLDS = ((400, "worker"), (2000, "scheduler"))


def kill_the_scheduler_and_a_worker_mid_stream(
    queue: QueueUnderTest,
    *,
    database_url: str,
    dags_folder: Path,
    engine: Engine,
    sink: Engine,
    total: int = 4000,
) -> None:
    """kill -9 of the worker handling a batch, then of the scheduler with its workers,
    each between "the batch is in the sink" and "its events are acknowledged" (the DAG
    holds there: ``consumer_dag(holds=HOLDS)``). Each lost try's retry resumes after the
    last acknowledged batch, so the sink ends with every message once and the queue
    drained; the two held batches were handled twice, which the sink's key absorbs."""
    (dags_folder / f"{queue.dag_id}.py").write_text(textwrap.dedent(queue.dag_source))
    env = component_env(database_url, dags_folder, worker_processes=2, scheduler_poll_interval=0.5)
    env.update(queue.env)
    scheduler = start_component(env, "scheduler")
    triggerer = start_component(env, "triggerer")

    def held(name: str) -> int | None:
        marker = dags_folder / f"{name}.held"
        return int(marker.read_text()) if marker.exists() and marker.read_text() else None

    try:
        assert run_cli(env, "dags", "trigger", queue.dag_id).returncode == 0
        publisher = threading.Thread(target=queue.publish, args=(0, total))
        publisher.start()
        # The worker handling a batch dies; the scheduler hears of it and retries.
        os.kill(wait_for(lambda: held("worker"), timeout=60), signal.SIGKILL)
        (dags_folder / "worker.go").touch()
        # The scheduler and its workers die together, mid-batch; the next one takes over.
        wait_for(lambda: held("scheduler"), timeout=60)
        # Once the held try's start is committed: a resumption whose start the scheduler
        # had not yet heard of goes back to waiting as the same try (`reset_orphan`), which
        # would leave this kill no lost try to count.
        wait_for(lambda: _consumer_running(engine, queue.dag_id), timeout=60)
        os.killpg(scheduler.pid, signal.SIGKILL)
        stop_component(scheduler)
        (dags_folder / "scheduler.go").touch()
        scheduler = start_component(env, "scheduler")
        publisher.join()
        wait_for(lambda: (_counts(sink)[0] == total and queue.drained()) or None, timeout=100)
        rows, distinct, attempts = _counts(sink)
        assert (rows, distinct) == (total, total)
        assert attempts > total, "the held batches were handled again by the retries"
        with engine.connect() as conn:
            tries = conn.scalar(
                select(TaskInstance.try_number).where(TaskInstance.dag_id == queue.dag_id)
            )
        # Two tries lost (a slow orphan check may lose one more): each was retried.
        assert tries is not None and tries >= 3, f"two lost tries, each retried: at try {tries}"
    finally:
        for proc in [scheduler, triggerer]:
            stop_component(proc)


# Every scenario the Redis and RabbitMQ triggers pass, by test id: the scenario, and the
# holds its DAG needs (``consumer_dag(holds=…)``).
SCENARIOS: dict[str, tuple[Callable[..., None], tuple[tuple[int, str], ...]]] = {
    "kill_the_triggerer": (kill_the_triggerer_mid_stream, ()),
    "pause_the_dag": (pause_ends_the_stream, ()),
    "kill_a_worker_then_the_scheduler": (kill_the_scheduler_and_a_worker_mid_stream, HOLDS),
}
