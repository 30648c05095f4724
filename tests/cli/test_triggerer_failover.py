"""Two triggerers on PostgreSQL; one is killed with its triggers in hand."""

from __future__ import annotations

import json
import os
import signal
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select

from tailrace.db.models import DagRun, Job, TaskInstance, Trigger, TriggerEvent
from tailrace.testing import component_env, run_cli, start_component, stop_component, wait_for

# Their triggers must still be pending, or mid-stream, when the test looks: not alongside
# the browser tests, which load the machine.
pytestmark = pytest.mark.exclusive

TASKS = 6

WAITERS = f"""
from datetime import UTC, datetime, timedelta
from tailrace import BaseOperator, dag
from tailrace.sdk.triggers import DateTimeTrigger

class WaitABit(BaseOperator):
    def execute(self, context):
        moment = datetime.now(UTC) + timedelta(seconds=4)
        self.defer(trigger=DateTimeTrigger(moment), method_name="execute_complete")

    def execute_complete(self, context, event=None):
        self.log.info("resumed by %s", event)
        return event

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def failover():
    for i in range({TASKS}):
        WaitABit(task_id=f"wait_{{i}}")

failover()
"""


@pytest.fixture
def cluster_env(database_url: str, dags_folder: Path) -> dict[str, str]:
    (dags_folder / "failover.py").write_text(textwrap.dedent(WAITERS))
    return component_env(
        database_url,
        dags_folder,
        worker_processes=2,
        trigger_lease_seconds=2,
        scheduler_poll_interval=0.5,
    )


@pytest.mark.parametrize("db_backend", ["postgres"])
def test_kill_9_of_a_triggerer_hands_its_triggers_to_the_other(
    cluster_env: dict[str, str], engine: Engine
) -> None:
    scheduler = start_component(cluster_env, "scheduler")
    triggerers = [start_component(cluster_env, "triggerer") for _ in range(2)]
    try:
        trigger = run_cli(cluster_env, "dags", "trigger", "failover")
        assert trigger.returncode == 0, trigger.stderr

        def holders() -> dict[int, int]:
            """trigger id -> pid of the triggerer holding it, once all are held."""
            with engine.connect() as conn:
                rows = conn.execute(
                    select(Trigger.id, Job.pid)
                    .outerjoin(Job, Job.id == Trigger.triggerer_job_id)
                    .where(Trigger.completed.is_(False))
                ).all()
            if len(rows) < TASKS or any(r.pid is None for r in rows):
                return {}
            return {r.id: r.pid for r in rows}

        held = wait_for(holders, timeout=60)
        listing = run_cli(cluster_env, "triggers", "list", "--json")
        listed = {t["id"]: t for t in json.loads(listing.stdout)}
        assert set(listed) == set(held)
        for trigger_id, pid in held.items():
            assert listed[trigger_id]["triggerer"].endswith(f":{pid}")
            assert listed[trigger_id]["task"].startswith("failover.wait_")
            assert listed[trigger_id]["task_state"] == "deferred"
        victim_pid = min(held.values())
        victim = next(p for p in triggerers if p.pid == victim_pid)
        taken = {t for t, pid in held.items() if pid == victim_pid}
        os.kill(victim_pid, signal.SIGKILL)
        victim.wait()

        def run_state() -> str | None:
            with engine.connect() as conn:
                return conn.scalar(select(DagRun.state))

        wait_for(lambda: run_state() == "success", timeout=90)
        with engine.connect() as conn:
            tis = conn.execute(select(TaskInstance.state, TaskInstance.try_number)).all()
            # Consumed events are pruned: the trigger rows keep how many there were.
            events = dict(conn.execute(select(Trigger.id, Trigger.next_sequence)).all())
            finishers = dict(
                conn.execute(
                    select(Trigger.id, Job.pid).join(Job, Job.id == Trigger.triggerer_job_id)
                ).all()
            )
        assert sorted(tis) == [("success", 1)] * TASKS
        assert events == {t: 1 for t in held}, "every trigger fired exactly once"
        wait_for(lambda: _no_events_left(engine), timeout=30)
        survivor = next(p for p in triggerers if p is not victim)
        assert {finishers[t] for t in taken} == {survivor.pid}
    finally:
        for proc in [scheduler, *triggerers]:
            stop_component(proc)


PAGES = 40

STREAMER = f"""
import asyncio
from datetime import datetime
from pathlib import Path
from tailrace import BaseOperator, BaseTrigger, TriggerEvent, dag

HERE = Path(__file__).parent


class Pager(BaseTrigger):
    # A paged source: each page's checkpoint is where the next page starts.
    def __init__(self, pages):
        super().__init__()
        self.pages = pages

    def serialize(self):
        return (f"{{__name__}}.Pager", {{"pages": self.pages}})

    async def run(self):
        start = self.checkpoint["next"] if self.checkpoint else 0
        with open(HERE / "starts.txt", "a") as f:
            f.write(f"{{start}}\\n")
        for page in range(start, self.pages):
            await asyncio.sleep(0.05)
            yield TriggerEvent({{"page": page}}, checkpoint={{"next": page + 1}})


class Collect(BaseOperator):
    def execute(self, context):
        self.defer(trigger=Pager({PAGES}), method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):
        with open(HERE / "handled.txt", "a") as f:
            for event in events:
                f.write(f"{{event.sequence_index}}\\n")
        return [event.payload["page"] for event in events]


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def streamer():
    Collect(task_id="collect", max_batch_size=5)

streamer()
"""


@pytest.mark.parametrize("db_backend", ["postgres"])
def test_kill_9_mid_stream_resumes_from_the_checkpoint_exactly_once_in_order(
    cluster_env: dict[str, str], engine: Engine, tmp_path: Path
) -> None:
    from tailrace.db.models import Stream
    from tailrace.serialization import loads
    from tailrace.streams import read_items

    dags = Path(cluster_env["TAILRACE_DAGS_FOLDER"])
    (dags / "failover.py").unlink()
    (dags / "streamer.py").write_text(textwrap.dedent(STREAMER))
    scheduler = start_component(cluster_env, "scheduler")
    triggerers = [start_component(cluster_env, "triggerer") for _ in range(2)]
    try:
        trigger = run_cli(cluster_env, "dags", "trigger", "streamer")
        assert trigger.returncode == 0, trigger.stderr

        def holder_mid_stream() -> int | None:
            with engine.connect() as conn:
                row = conn.execute(
                    select(Trigger.next_sequence, Job.pid).join(
                        Job, Job.id == Trigger.triggerer_job_id
                    )
                ).first()
            return row.pid if row is not None and 10 <= row.next_sequence < PAGES else None

        victim_pid = wait_for(holder_mid_stream, timeout=60)
        os.kill(victim_pid, signal.SIGKILL)
        next(p for p in triggerers if p.pid == victim_pid).wait()

        def run_state() -> str | None:
            with engine.connect() as conn:
                return conn.scalar(select(DagRun.state))

        wait_for(lambda: run_state() == "success", timeout=90)
        with engine.connect() as conn:
            ti_id = conn.scalar(select(TaskInstance.id))
            items = [loads(v) for v in read_items(conn, ti_id, 0, 1000)]
            trigger = conn.execute(select(Trigger)).one()
            assert conn.scalar(select(Stream.closed)) is True
        assert items == list(range(PAGES)), "every page once, in order"
        # Every event was stored once (the sequence has no gap and no repeat) and, consumed,
        # pruned: a re-yielded one after the takeover did not come back.
        assert (trigger.next_sequence, trigger.acked_sequence) == (PAGES, PAGES - 1)
        wait_for(lambda: _no_events_left(engine), timeout=30)
        handled = [int(x) for x in (dags / "handled.txt").read_text().split()]
        assert handled == list(range(PAGES)), "each event handled exactly once, in order"
        starts = [int(x) for x in (dags / "starts.txt").read_text().split()]
        assert starts[0] == 0 and len(starts) == 2 and 0 < starts[1] <= PAGES
    finally:
        for proc in [scheduler, *triggerers]:
            stop_component(proc)


def _no_events_left(engine: Engine) -> bool:
    with engine.connect() as conn:
        return conn.scalar(select(func.count()).select_from(TriggerEvent)) == 0
