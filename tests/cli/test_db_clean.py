"""`tailrace db clean`: what finished before a moment goes, in batches, while things run."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select

from tailrace.cleanup import MAX_ROWS, clean, table_names
from tailrace.dagrun import trigger_dag_run
from tailrace.db.models import (
    DagRun,
    ImportError_,
    Job,
    Stream,
    StreamItem,
    TaskInstance,
    TaskInstanceHistory,
    Trigger,
    TriggerDedup,
    TriggerEvent,
    XCom,
)
from tailrace.streams import append_items
from tailrace.testing import DagHarness, component_env, wait_for

WriteDag = Callable[[str, str], Path]

DAGS = """
import asyncio
from datetime import datetime
from tailrace import BaseOperator, BaseTrigger, StartTriggerArgs, TriggerEvent, dag, task


class Items(BaseTrigger):
    def __init__(self, n, pause=0.0):
        super().__init__()
        self.n, self.pause = n, pause

    def serialize(self):
        return (f"{__name__}.Items", {"n": self.n, "pause": self.pause})

    async def run(self):
        for i in range(self.n):
            yield TriggerEvent(i)
            await asyncio.sleep(self.pause)


class Produce(BaseOperator):
    def __init__(self, n, pause=0.0, **kwargs):
        super().__init__(**kwargs)
        self.n, self.pause = n, pause

    def execute(self, context):
        self.defer(trigger=Items(self.n, self.pause), method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):
        return [e.payload for e in events]


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def short():
    @task
    def double(x):
        return 2 * x

    double.iterate(x=Produce(task_id="produce", n=20).output)


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def streaming():
    Produce(task_id="produce", n=400, pause=0.01, max_batch_size=10, max_pending_events=20)

short()
streaming()
"""


def _count(engine: Engine, model: type) -> int:
    with engine.connect() as conn:
        return conn.scalar(select(func.count()).select_from(model)) or 0


def _run_ids(engine: Engine) -> set[int]:
    with engine.connect() as conn:
        return set(conn.scalars(select(DagRun.id)))


def test_db_clean_during_a_streaming_run_removes_the_finished_runs_and_their_logs_only(
    harness: DagHarness, write_dag: WriteDag, database_url: str, dags_folder: Path, tmp_path: Path
) -> None:
    write_dag("dags.py", DAGS)
    harness.parse()
    old = [trigger_dag_run(harness.engine, "short", {}, run_id=f"old_{i}")[0] for i in range(2)]
    for pk in old:
        assert harness.run(pk)["state"] == "success"
    logs = tmp_path / "logs"
    assert any(logs.rglob("*.log"))
    env = component_env(database_url, dags_folder, log_folder=logs)
    with harness.running():
        live = harness.trigger("streaming")

        def streaming_with_pruning() -> bool:
            with harness.engine.connect() as conn:
                trigger = conn.execute(select(Trigger).where(Trigger.completed.is_(False))).first()
            return trigger is not None and trigger.pruned_sequence >= 10

        wait_for(streaming_with_pruning, timeout=60)
        before = datetime.now(UTC)
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "tailrace",
                "db",
                "clean",
                "--yes",
                "--json",
                "--clean-before-timestamp",
                before.isoformat(),
            ],
            env=env,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        wait_for(lambda: harness.is_finished(live), timeout=110)
    assert harness.summary(live)["state"] == "success"
    rows = {t["table"]: t["rows"] for t in report["tables"]}
    assert rows["dag_run"] == 2
    assert report["log_files"] > 0
    assert _run_ids(harness.engine) == {live}
    assert harness.stream_items(live, "produce") == list(range(400)), "the live stream is whole"
    with harness.engine.connect() as conn:
        left_tis = conn.scalar(select(func.count()).select_from(TaskInstance))
        history_of_live = conn.scalar(select(func.count()).select_from(TaskInstanceHistory))
        xcoms = set(conn.scalars(select(XCom.dag_run_id)))
    assert left_tis == 1 and history_of_live == 1 and xcoms <= {live}
    assert not any(p for p in logs.rglob("*.log") if "old_" in str(p))
    assert any(p for p in logs.rglob("*.log") if "old_" not in str(p))


def test_db_clean_deletes_in_batches_and_gives_sqlite_space_back(
    harness: DagHarness, write_dag: WriteDag, tmp_path: Path
) -> None:
    write_dag("dags.py", DAGS)
    harness.parse()
    pk = harness.trigger("short")
    assert harness.run(pk)["state"] == "success"
    produce = harness.task_instance(pk, "produce")
    ti_id, trigger_id = produce.id, produce.trigger_id
    assert trigger_id is not None
    with harness.engine.begin() as conn:
        big = ['{"row": "' + "x" * 200 + '"}'] * 30_000
        append_items(conn, ti_id, big, datetime.now(UTC))
        # As a queue trigger's messages would have left (ADR 0032).
        conn.execute(
            TriggerDedup.__table__.insert(),
            [
                {
                    "trigger_id": trigger_id,
                    "sequence_index": 1000 + i,
                    "dedup_key": f"m{i}",
                    "committed_at": datetime.now(UTC),
                }
                for i in range(3000)
            ],
        )
        conn.execute(
            ImportError_.__table__.insert().values(
                filename="/gone.py", message="m", stacktrace="", timestamp=datetime.now(UTC)
            )
        )
        conn.execute(
            Job.__table__.insert().values(
                job_type="scheduler",
                hostname="h",
                pid=1,
                state="stopped",
                start_date=datetime.now(UTC),
                latest_heartbeat=datetime.now(UTC),
            )
        )
    batches: list[tuple[str, int]] = []
    moment = datetime.now(UTC) + timedelta(microseconds=1)
    dry = clean(harness.engine, moment, now=moment, dry_run=True, batch=1000)
    counted = {r.table: r.rows for r in dry.results}
    assert counted["dag_run"] == 1 and counted["stream_item"] == 30_020
    assert counted["import_error"] == 1 and counted["job"] >= 1
    assert _count(harness.engine, StreamItem) == 30_020, "a dry run deletes nothing"
    report = clean(
        harness.engine,
        moment,
        now=moment,
        batch=1000,
        log_folder=tmp_path / "logs",
        on_batch=lambda t, n: batches.append((t, n)),
    )
    assert {t: n for t, n in ((r.table, r.rows) for r in report.results)}["dag_run"] == 1
    for model in (
        DagRun,
        TaskInstance,
        XCom,
        Stream,
        StreamItem,
        Trigger,
        TriggerEvent,
        TriggerDedup,
    ):
        assert _count(harness.engine, model) == 0, model
    assert _count(harness.engine, ImportError_) == 0
    # Items, events and dedup records (small rows, deleted by key range) go at most MAX_ROWS
    # at a time (as many as fit in a short transaction), other rows a batch at a time.
    small = ("stream_item", "trigger_event", "trigger_dedup")
    assert max(n for t, n in batches if t in small) <= MAX_ROWS
    assert max(n for t, n in batches if t not in small) <= 1000
    assert sum(n for t, n in batches if t == "trigger_dedup") == 3000
    assert sum(n for t, n in batches if t == "stream_item") == 30_020
    if harness.engine.dialect.name == "sqlite":
        assert report.freed_bytes and report.freed_bytes > 30_000 * 200
        assert "incremental vacuum" in report.vacuum


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tailrace", "db", "clean", *args],
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


def _said(done: subprocess.CompletedProcess[str]) -> str:
    return " ".join(done.stderr.split())  # rich wraps long lines


@pytest.mark.parametrize("db_backend", ["sqlite"])
def test_db_clean_refuses_a_future_moment_unknown_tables_and_no_terminal_to_ask_on(
    database_url: str, dags_folder: Path
) -> None:
    env = component_env(database_url, dags_folder)
    future = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    refused = _cli(env, "--clean-before-timestamp", future, "--yes")
    assert refused.returncode == 1
    assert "is in the future" in _said(refused) and "pass a moment in the past" in _said(refused)
    past = "2026-01-01T00:00:00+00:00"
    unknown = _cli(env, "--clean-before-timestamp", past, "--tables", "dag_run,bogus", "--yes")
    assert unknown.returncode == 1 and "unknown table bogus" in _said(unknown)
    assert all(name in _said(unknown) for name in table_names())
    unasked = _cli(env, "--clean-before-timestamp", past)
    assert unasked.returncode == 1
    assert "no terminal to ask on" in _said(unasked) and "--yes" in _said(unasked)
    garbage = _cli(env, "--clean-before-timestamp", "last tuesday", "--yes")
    assert garbage.returncode == 1 and "is not a moment" in _said(garbage)
    dry = _cli(env, "--clean-before-timestamp", past, "--dry-run", "--tables", "job")
    assert dry.returncode == 0, _said(dry)
    shown = " ".join(dry.stdout.split())
    assert "dry run, nothing deleted" in shown and "│ job" in shown
