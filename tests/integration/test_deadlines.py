"""Deadline alerts end to end (Airflow 3.1's DeadlineAlert): a run unfinished at its
deadline has its callback called — a SyncCallback by a worker, an AsyncCallback by the
triggerer — with the deadline's context; a run that finishes first never calls it; what
Tailrace cannot honour is an import error naming the DAG and the argument."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select, update

from tailrace.cleanup import clean
from tailrace.dagrun import clear_task_instances
from tailrace.db.models import DagRun, Deadline, ImportError_
from tailrace.store import deadlines
from tailrace.testing import DagHarness, FakeClock

WriteDag = Callable[[str, str], Path]

# A DAG whose task waits for the file RELEASE: the test decides when its run finishes.
HEADER = """
import json, os, threading, time
from datetime import datetime, timedelta
from tailrace import AsyncCallback, DeadlineAlert, DeadlineReference, SyncCallback, dag, task

OUT = {out!r}
RELEASE = {release!r}


def record(context, **kwargs):
    with open(OUT, "a") as f:
        f.write(json.dumps({{
            "pid": os.getpid(),
            "kwargs": kwargs,
            "dag_run": context["dag_run"],
            "deadline": context["deadline"],
        }}) + "\\n")


async def record_async(context, **kwargs):
    import asyncio
    asyncio.get_running_loop()  # raises outside a running event loop
    record(context, thread=threading.current_thread().name, **kwargs)


def waits_for_release():
    while not os.path.exists(RELEASE):
        time.sleep(0.02)
"""


ONE_HOUR = (
    "DeadlineAlert(DeadlineReference.DAGRUN_QUEUED_AT, timedelta(hours=1), SyncCallback(record))"
)


def calls(out: Path) -> list[dict[str, Any]]:
    if not out.exists():
        return []
    return [json.loads(line) for line in out.read_text().splitlines()]


def rows(engine: Engine, dag_run_id: int) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return deadlines.of_run(conn, dag_run_id)


def _write(
    write_dag: WriteDag,
    tmp_path: Path,
    name: str,
    deadline: str,
    *,
    work: str = "waits_for_release()",
    before: str = "",
) -> tuple[Path, Path]:
    """DAG ``name`` with ``deadline=<deadline>`` and one task, ``work``, running ``work``."""
    out, release = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.release"
    body = f"""{before}
@dag(schedule=None, start_date=datetime(2026, 1, 1), deadline={deadline})
def {name}():
    @task
    def work():
        {work}

    work()

{name}()
"""
    write_dag(f"{name}.py", HEADER.format(out=str(out), release=str(release)) + body)
    return out, release


WriteDeadlineDag = Callable[..., tuple[Path, Path]]


@pytest.fixture
def deadline_dag(write_dag: WriteDag, tmp_path: Path) -> WriteDeadlineDag:
    """``_write`` into the test's DAGs folder: ``deadline_dag(name, deadline, ...)``."""
    return functools.partial(_write, write_dag, tmp_path)


def _pass_the_deadline(
    harness: DagHarness, clock: FakeClock, dag_run_id: int, started: Callable[[], bool]
) -> None:
    """Let the run get going, then move the scheduler's clock past its first deadline."""
    harness.start()
    assert harness.scheduler.run_until(started, timeout=60)
    first = min(r["deadline_time"] for r in rows(harness.engine, dag_run_id))
    clock.set(first + timedelta(seconds=1))
    harness.scheduler.wake()


def test_a_missed_deadline_calls_its_sync_callback_in_a_worker_with_the_deadlines_context(
    clocked: DagHarness, clock: FakeClock, deadline_dag: WriteDeadlineDag, tmp_path: Path
) -> None:
    harness = clocked
    out, release = deadline_dag(
        "late_sync",
        """DeadlineAlert(
    reference=DeadlineReference.DAGRUN_QUEUED_AT,
    interval=timedelta(hours=1),
    callback=SyncCallback(
        record,
        kwargs={"text": "{{ dag_run.dag_id }} missed {{ deadline.deadline_time }}", "n": 7},
    ),
    name="an hour",
)""",
    )
    harness.parse()
    pk = harness.trigger("late_sync", {"region": "eu"})
    [pending] = rows(harness.engine, pk)
    assert (pending["name"], pending["missed"], pending["callback"]) == ("an hour", False, None)
    _pass_the_deadline(harness, clock, pk, lambda: harness.states(pk)["work"] == "running")
    assert harness.scheduler.run_until(lambda: bool(calls(out)), timeout=60)
    release.touch()
    summary = harness.run(pk)
    assert summary["state"] == "success"  # a deadline alerts; it does not fail the run
    assert harness.dag_callbacks(pk) == [
        {"kind": "deadline", "reason": "deadline_missed", "state": "success", "error": None}
    ]
    [call] = calls(out)
    # A worker called it: not this process (the scheduler's), one of the pool's.
    assert call["pid"] != os.getpid() and call["pid"] in harness.executor.worker_pids
    deadline_time = datetime.fromisoformat(call["deadline"]["deadline_time"])
    assert deadline_time == pending["deadline_time"]
    assert call["kwargs"] == {
        "text": f"late_sync missed {call['deadline']['deadline_time']}",
        "n": 7,
    }
    assert call["deadline"]["name"] == "an hour"
    run = call["dag_run"]
    assert (run["dag_id"], run["run_id"], run["state"]) == (
        "late_sync",
        summary["run_id"],
        "running",
    )
    assert run["conf"] == {"region": "eu"}
    assert {"logical_date", "queued_at", "start_date", "end_date", "run_type"} <= set(run)
    [missed] = rows(harness.engine, pk)
    assert missed["missed"] and (missed["callback"], missed["callback_state"]) == (
        "sync",
        "success",
    )
    log = tmp_path / "logs" / "dag_id=late_sync" / f"run_id={summary['run_id']}"
    assert "missed its deadline an hour" in (log / "dag_on_deadline_callback.log").read_text()


def test_an_async_callback_is_awaited_in_the_triggerer(
    clocked: DagHarness, clock: FakeClock, deadline_dag: WriteDeadlineDag
) -> None:
    harness = clocked
    out, release = deadline_dag(
        "late_async",
        """[
    DeadlineAlert(
        reference=DeadlineReference.DAGRUN_LOGICAL_DATE,
        interval=timedelta(hours=1),
        callback=AsyncCallback(record_async, kwargs={"text": "{{ dag_run.run_id }}"}),
    ),
    # Far ahead: cancelled when the run finishes.
    DeadlineAlert(
        reference=DeadlineReference.DAGRUN_QUEUED_AT,
        interval=timedelta(days=1),
        callback=SyncCallback(record),
    ),
]""",
    )
    harness.parse()
    pk = harness.trigger("late_async")
    assert [r["missed"] for r in rows(harness.engine, pk)] == [False, False]
    _pass_the_deadline(harness, clock, pk, lambda: harness.states(pk)["work"] == "running")

    def ended() -> dict[str, Any] | None:
        first = rows(harness.engine, pk)[0]
        return first if first["callback_state"] in ("success", "failed") else None

    assert harness.scheduler.run_until(lambda: ended() is not None, timeout=60)
    first = ended()
    assert first is not None
    assert (first["callback"], first["callback_state"], first["callback_error"]) == (
        "async",
        "success",
        None,
    )
    [call] = calls(out)
    # The triggerer runs on a thread of this process, in its event loop; no worker did.
    assert call["pid"] == os.getpid() and call["kwargs"]["thread"] == "triggerer"
    assert call["kwargs"]["text"] == call["dag_run"]["run_id"]
    release.touch()
    assert harness.run(pk)["state"] == "success"
    # The second alert was still ahead: the run's end cancelled it.
    assert [r["missed"] for r in rows(harness.engine, pk)] == [True]
    assert harness.dag_callbacks(pk) == []


def test_an_async_callback_that_raises_is_recorded_as_failed(
    clocked: DagHarness, clock: FakeClock, deadline_dag: WriteDeadlineDag
) -> None:
    harness = clocked
    _, release = deadline_dag(
        "late_broken",
        """DeadlineAlert(
    DeadlineReference.DAGRUN_QUEUED_AT, timedelta(hours=1), AsyncCallback(broken)
)""",
        before="""
async def broken(context):
    raise RuntimeError("the pager is down")
""",
    )
    harness.parse()
    pk = harness.trigger("late_broken")
    _pass_the_deadline(harness, clock, pk, lambda: harness.states(pk)["work"] == "running")
    assert harness.scheduler.run_until(
        lambda: rows(harness.engine, pk)[0]["callback_state"] == "failed", timeout=60
    )
    assert "RuntimeError: the pager is down" in rows(harness.engine, pk)[0]["callback_error"]
    release.touch()
    assert harness.run(pk)["state"] == "success"


def test_a_run_that_finishes_before_its_deadline_never_calls_back(
    clocked: DagHarness, clock: FakeClock, deadline_dag: WriteDeadlineDag
) -> None:
    harness = clocked
    out, _ = deadline_dag(
        "in_time",
        ONE_HOUR,
        work="return 1",
    )
    harness.parse()
    pk = harness.trigger("in_time")
    assert len(rows(harness.engine, pk)) == 1
    assert harness.run(pk)["state"] == "success"
    assert rows(harness.engine, pk) == []  # cancelled with the run's end
    # The deadline's moment passes, and the scheduler looks: nothing is due.
    clock.advance(timedelta(hours=2))
    steps = harness.scheduler.steps
    harness.scheduler.wake()
    assert harness.scheduler.run_until(lambda: harness.scheduler.steps > steps + 1, timeout=30)
    assert harness.scheduler.next_timer is None
    assert harness.dag_callbacks(pk) == [] and calls(out) == []


def test_references_are_computed_as_airflow_does_and_a_cleared_run_counts_from_its_requeue(
    harness: DagHarness, deadline_dag: WriteDeadlineDag
) -> None:
    fixed = datetime(2030, 6, 1, 9, 30, tzinfo=UTC)
    deadline_dag(
        "refs",
        f"""[
    DeadlineAlert(DeadlineReference.DAGRUN_QUEUED_AT, timedelta(minutes=5), CALL, name="queued"),
    DeadlineAlert(DeadlineReference.DAGRUN_LOGICAL_DATE, timedelta(hours=2), CALL, name="logical"),
    DeadlineAlert(
        DeadlineReference.FIXED_DATETIME(datetime.fromisoformat({fixed.isoformat()!r})),
        timedelta(minutes=-30),
        CALL,
        name="fixed",
    ),
    DeadlineAlert(
        DeadlineReference.AVERAGE_RUNTIME(max_runs=2, min_runs=2),
        timedelta(minutes=10),
        CALL,
        name="average",
    ),
]""",
        work="return 1",
        before="CALL = SyncCallback(record)",
    )
    harness.parse()
    # Ahead (a manual run may have any logical date): the run's end cancels its deadline.
    logical = datetime.now(UTC).replace(microsecond=0) + timedelta(days=1)
    first = harness.trigger("refs", logical_date=logical)
    with harness.engine.connect() as conn:
        queued_at = conn.scalar(select(DagRun.queued_at).where(DagRun.id == first))
    by_name = {r["name"]: r["deadline_time"] for r in rows(harness.engine, first)}
    # No finished runs yet: AVERAGE_RUNTIME makes no deadline, as in Airflow.
    assert by_name == {
        "queued": queued_at + timedelta(minutes=5),
        "logical": logical + timedelta(hours=2),
        "fixed": fixed - timedelta(minutes=30),
    }
    # Two finished runs of 60 s and 120 s: the next run's deadline is 90 s + 10 min away.
    for minutes, seconds in ((1, 60), (2, 120)):
        pk = harness.trigger("refs", logical_date=logical + timedelta(days=minutes))
        start = datetime(2026, 1, 1, tzinfo=UTC)
        with harness.engine.begin() as conn:
            conn.execute(
                update(DagRun)
                .where(DagRun.id == pk)
                .values(
                    state="success", start_date=start, end_date=start + timedelta(seconds=seconds)
                )
            )
    before = datetime.now(UTC)
    third = harness.trigger("refs", logical_date=logical + timedelta(days=3))
    average = {r["name"]: r["deadline_time"] for r in rows(harness.engine, third)}["average"]
    assert before + timedelta(seconds=690) <= average <= datetime.now(UTC) + timedelta(seconds=690)
    # The first run finishes in time, is cleared, and is queued again: its queued-at
    # deadline counts from the new queue time (the others were computed once, at creation).
    assert harness.run(first)["state"] == "success"
    assert rows(harness.engine, first) == []
    with harness.engine.begin() as conn:
        clear_task_instances(conn, first, None, datetime.now(UTC))
        requeued_at = conn.scalar(select(DagRun.queued_at).where(DagRun.id == first))
    [again] = rows(harness.engine, first)
    assert (again["name"], again["deadline_time"]) == ("queued", requeued_at + timedelta(minutes=5))


def test_db_clean_removes_a_finished_runs_deadlines(
    clocked: DagHarness, clock: FakeClock, deadline_dag: WriteDeadlineDag
) -> None:
    harness = clocked
    out, release = deadline_dag(
        "cleaned",
        ONE_HOUR,
    )
    harness.parse()
    pk = harness.trigger("cleaned")
    _pass_the_deadline(harness, clock, pk, lambda: harness.states(pk)["work"] == "running")
    assert harness.scheduler.run_until(lambda: bool(calls(out)), timeout=60)
    release.touch()
    harness.run(pk)
    harness.dag_callbacks(pk)
    assert len(rows(harness.engine, pk)) == 1
    now = datetime.now(UTC) + timedelta(hours=3)
    report = clean(harness.engine, now, now=now, tables=["dag_run", "deadline"])
    assert {r.table: r.rows for r in report.results}["deadline"] == 1
    with harness.engine.connect() as conn:
        assert conn.scalar(select(Deadline.id)) is None


BAD = [
    (
        "DeadlineReference.DAGRUN_QUEUED_AT, timedelta(minutes=-5), SyncCallback(record)",
        "the interval -0:05:00 is negative",
    ),
    (
        "object(), timedelta(minutes=5), SyncCallback(record)",
        "is not a deadline reference Tailrace knows",
    ),
    (
        "DeadlineReference.DAGRUN_QUEUED_AT, timedelta(minutes=5), SyncCallback('json.decoder')",
        "'json.decoder' is <module",
    ),
]


@pytest.mark.parametrize(("arguments", "message"), BAD)
def test_bad_deadlines_are_import_errors_naming_the_dag_and_the_argument(
    harness: DagHarness, deadline_dag: WriteDeadlineDag, arguments: str, message: str
) -> None:
    deadline_dag("bad_deadline", f"DeadlineAlert({arguments})", work="return 1")
    report = harness.parse()
    assert (report.dags, report.import_errors) == (0, 1)
    with harness.engine.connect() as conn:
        (error,) = conn.execute(select(ImportError_)).all()
    assert message in error.message
    assert "DAG 'bad_deadline'" in error.message and "deadline" in error.message
