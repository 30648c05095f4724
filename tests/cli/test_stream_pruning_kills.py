"""Pruning under kill -9: of the triggerer holding the stream, and of the scheduler."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select

from tailrace.db.models import DagRun, Job, TaskInstance, Trigger, TriggerEvent
from tailrace.serialization import loads
from tailrace.streams import read_items
from tailrace.testing import (
    component_env,
    kill_component,
    run_cli,
    start_component,
    stop_component,
    wait_for,
)

pytestmark = pytest.mark.exclusive

PAGES = 300

# No checkpoint: a takeover starts the source again from its first page, so every event
# the new triggerer yields up to the acknowledgement was pruned already — the watermark
# must drop them, or the consumer would see them twice.
STREAMER = f"""
import asyncio
from datetime import datetime
from pathlib import Path
from tailrace import BaseOperator, BaseTrigger, TriggerEvent, dag

HERE = Path(__file__).parent


class Restarting(BaseTrigger):
    def __init__(self, pages):
        super().__init__()
        self.pages = pages

    def serialize(self):
        return (f"{{__name__}}.Restarting", {{"pages": self.pages}})

    async def run(self):
        with open(HERE / "starts.txt", "a") as f:
            f.write("start\\n")
        for page in range(self.pages):
            await asyncio.sleep(0.02)
            yield TriggerEvent({{"page": page}})


class Collect(BaseOperator):
    def execute(self, context):
        self.defer(trigger=Restarting({PAGES}), method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):
        with open(HERE / "handled.txt", "a") as f:
            for event in events:
                f.write(f"{{event.sequence_index}}\\n")
        return [event.payload["page"] for event in events]


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def streamer():
    Collect(task_id="collect", max_batch_size=5, max_pending_events=20)

streamer()
"""


@pytest.fixture
def cluster_env(database_url: str, dags_folder: Path) -> dict[str, str]:
    (dags_folder / "streamer.py").write_text(textwrap.dedent(STREAMER))
    return component_env(
        database_url,
        dags_folder,
        worker_processes=2,
        trigger_lease_seconds=2,
        scheduler_poll_interval=0.5,
    )


def _trigger(engine: Engine) -> Trigger | None:
    with engine.connect() as conn:
        return conn.execute(select(Trigger)).first()  # type: ignore[return-value]


def _finished(engine: Engine) -> bool:
    with engine.connect() as conn:
        return conn.scalar(select(DagRun.state)) == "success"


def _check_output(engine: Engine, dags: Path, *, handled_once: bool) -> None:
    with engine.connect() as conn:
        ti_id = conn.scalar(select(TaskInstance.id))
        assert ti_id is not None
        items = [loads(v) for v in read_items(conn, ti_id, 0, 10_000)]
    assert items == list(range(PAGES)), "every page once, in order"
    if handled_once:
        handled = [int(x) for x in (dags / "handled.txt").read_text().split()]
        assert handled == list(range(PAGES)), "each event handled exactly once, in order"

    def all_pruned() -> bool:
        with engine.connect() as conn:
            return conn.scalar(select(func.count()).select_from(TriggerEvent)) == 0

    wait_for(all_pruned, timeout=30)


@pytest.mark.parametrize("db_backend", ["postgres"])
def test_kill_9_of_the_triggerer_after_pruning_began_handles_every_event_once_in_order(
    cluster_env: dict[str, str], engine: Engine
) -> None:
    dags = Path(cluster_env["TAILRACE_DAGS_FOLDER"])
    scheduler = start_component(cluster_env, "scheduler")
    triggerers = [start_component(cluster_env, "triggerer") for _ in range(2)]
    try:
        assert run_cli(cluster_env, "dags", "trigger", "streamer").returncode == 0

        def holder_after_pruning() -> int | None:
            with engine.connect() as conn:
                row = conn.execute(
                    select(Trigger.pruned_sequence, Trigger.next_sequence, Job.pid).join(
                        Job, Job.id == Trigger.triggerer_job_id
                    )
                ).first()
            if row is None or not (row.pruned_sequence >= 50 and row.next_sequence < PAGES - 50):
                return None
            return int(row.pid)

        victim_pid = wait_for(holder_after_pruning, timeout=90)
        victim = next(p for p in triggerers if p.pid == victim_pid)
        kill_component(victim)
        wait_for(lambda: _finished(engine), timeout=110)
        trigger = _trigger(engine)
        assert trigger is not None and trigger.next_sequence == PAGES
        # The survivor ran the source again from its start.
        assert (dags / "starts.txt").read_text().split() == ["start", "start"]
        _check_output(engine, dags, handled_once=True)
    finally:
        for proc in [scheduler, *triggerers]:
            stop_component(proc)


@pytest.mark.parametrize("db_backend", ["postgres"])
def test_kill_9_of_the_scheduler_while_it_prunes_loses_and_repeats_nothing(
    cluster_env: dict[str, str], engine: Engine
) -> None:
    dags = Path(cluster_env["TAILRACE_DAGS_FOLDER"])
    scheduler = start_component(cluster_env, "scheduler")
    triggerer = start_component(cluster_env, "triggerer")
    procs = [scheduler, triggerer]
    try:
        assert run_cli(cluster_env, "dags", "trigger", "streamer").returncode == 0

        def pruning_mid_stream() -> bool:
            t = _trigger(engine)
            return t is not None and t.pruned_sequence >= 50 and t.next_sequence < PAGES - 50

        wait_for(pruning_mid_stream, timeout=90)
        # Its worker pool goes with it: a batch on a worker when it died is handled again
        # by the next scheduler (its output was never committed), so only the committed
        # output is checked for "once".
        kill_component(scheduler)
        procs.append(start_component(cluster_env, "scheduler"))
        wait_for(lambda: _finished(engine), timeout=110)
        trigger = _trigger(engine)
        assert trigger is not None and trigger.next_sequence == PAGES
        _check_output(engine, dags, handled_once=False)
    finally:
        for proc in procs:
            stop_component(proc)
