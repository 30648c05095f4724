"""A scheduler killed with ``kill -9`` in the middle of an ``.iterate()`` expansion."""

from __future__ import annotations

import os
import signal
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select

from tailrace.db.models import DagRun, TaskInstance, XCom
from tailrace.serialization import loads
from tailrace.testing import component_env, run_cli, start_component, stop_component, wait_for

ITEMS = 600
HOLD_AFTER = 400

PIPELINE = f"""
import asyncio
from pathlib import Path
from tailrace import BaseOperator, BaseTrigger, StartTriggerArgs, TriggerEvent, dag, task

HERE = Path(__file__).parent


class Numbers(BaseTrigger):
    # {ITEMS} items; after {HOLD_AFTER} it waits for the file `release`.
    def serialize(self):
        return (f"{{__name__}}.Numbers", {{}})

    async def run(self):
        for i in range({ITEMS}):
            if i == {HOLD_AFTER}:
                while not (HERE / "release").exists():
                    await asyncio.sleep(0.02)
            yield TriggerEvent(i)


class Produce(BaseOperator):
    start_from_trigger = True
    start_trigger_args = StartTriggerArgs(trigger_cls=f"{{__name__}}.Numbers")

    def execute(self, context):
        raise AssertionError("starts in the triggerer")


@task(retries=3, retry_delay=0)
def echo(n):
    return n


@dag(schedule=None)
def restart():
    echo.iterate(n=Produce(task_id="produce", max_pending_events=10_000).output)

restart()
"""


@pytest.fixture
def env(database_url: str, dags_folder: Path) -> dict[str, str]:
    (dags_folder / "restart.py").write_text(textwrap.dedent(PIPELINE))
    # Small passes: the kill lands in the middle of the expansion.
    return component_env(
        database_url,
        dags_folder,
        worker_processes=2,
        scheduler_poll_interval=0.5,
        iterate_expansion_batch=7,
    )


def test_kill_9_mid_expansion_creates_every_instance_exactly_once(
    env: dict[str, str], engine: Engine
) -> None:
    triggerer = start_component(env, "triggerer")
    scheduler = start_component(env, "scheduler")
    try:
        trigger = run_cli(env, "dags", "trigger", "restart")
        assert trigger.returncode == 0, trigger.stderr

        def expanded() -> int:
            with engine.connect() as conn:
                return int(
                    conn.scalar(
                        select(func.count())
                        .select_from(TaskInstance)
                        .where(TaskInstance.task_id == "echo", TaskInstance.map_index >= 0)
                    )
                    or 0
                )

        wait_for(lambda: expanded() >= 100, timeout=60)
        # The scheduler and its workers die together, mid-pass.
        os.killpg(scheduler.pid, signal.SIGKILL)
        stop_component(scheduler)
        before = expanded()
        assert 100 <= before <= HOLD_AFTER  # the stream was still open
        (Path(env["TAILRACE_DAGS_FOLDER"]) / "release").touch()
        scheduler = start_component(env, "scheduler")

        def finished() -> str | None:
            with engine.connect() as conn:
                state = conn.scalar(select(DagRun.state))
            return state if state in ("success", "failed") else None

        assert wait_for(finished, timeout=120) == "success"
    finally:
        stop_component(scheduler)
        stop_component(triggerer)
    with engine.connect() as conn:
        rows = conn.execute(
            select(TaskInstance.map_index, TaskInstance.state)
            .where(TaskInstance.task_id == "echo")
            .order_by(TaskInstance.map_index)
        ).all()
        values = dict(
            conn.execute(select(XCom.map_index, XCom.value).where(XCom.task_id == "echo")).all()
        )
    # One instance per item, none missing, none twice; each handled its own item.
    assert [r.map_index for r in rows] == list(range(ITEMS))
    assert {r.state for r in rows} == {"success"}
    assert {i: loads(v) for i, v in values.items()} == {i: i for i in range(ITEMS)}
