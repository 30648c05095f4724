"""Pools limit concurrency as in Airflow: the task instances of a pool take its slots
(``pool_slots`` each) while queued or running, and the rest wait, scheduled, until a slot
frees up; max_active_tis_per_dag caps one task across all runs of its DAG."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Engine, update

from tailrace.dag_processing._parse import ParsedFile
from tailrace.dag_processing.processor import sync_parsed
from tailrace.dagrun import trigger_dag_run
from tailrace.db.models import TaskInstance
from tailrace.serialization import SerializedDag, SerializedSchedule, SerializedTask, dumps
from tailrace.store import pools
from tailrace.testing import DagHarness

WriteDag = Callable[[str, str], Path]

ACTIVE = ("queued", "running")
NOW = datetime(2026, 12, 4, 12, tzinfo=UTC)

SOURCE = """
import os, time
from tailrace import DAG
from tailrace.sdk.operators.python import PythonOperator

FOLDER = {folder!r}


def blocked(name):
    # Runs until the test releases it: the test decides when a slot frees up.
    while not os.path.exists(os.path.join(FOLDER, "release-" + name)):
        time.sleep(0.02)


with DAG({dag_id!r}):
{tasks}
"""


def _task(name: str, **kwargs: object) -> str:
    extra = "".join(f", {k}={v!r}" for k, v in kwargs.items())
    return (
        f"    PythonOperator(task_id={name!r}, python_callable=blocked, "
        f"op_args=[{name!r}]{extra})\n"
    )


def _active(harness: DagHarness, pk: int) -> set[str]:
    return {t for t, s in harness.states(pk).items() if s in ACTIVE}


def _until(harness: DagHarness, condition: Callable[[], bool]) -> None:
    assert harness.scheduler.run_until(condition, timeout=60)


def test_a_pool_of_one_slot_runs_its_tasks_one_at_a_time(
    harness: DagHarness, write_dag: WriteDag, tmp_path: Path
) -> None:
    with harness.engine.begin() as conn:
        pools.set_pool(conn, "one", 1, "a single connection")
    tasks = "".join(_task(n, pool="one") for n in ("a", "b", "c")) + _task("free")
    write_dag("pooled.py", SOURCE.format(folder=str(tmp_path), dag_id="pooled", tasks=tasks))
    harness.parse()
    pk = harness.trigger("pooled")
    harness.start()
    done: list[str] = []
    for _ in range(3):
        # One of the pool's tasks holds its only slot; the others wait, scheduled.
        _until(harness, lambda: bool(_active(harness, pk) - {"free"}))
        [holder] = _active(harness, pk) - {"free"}
        states = harness.states(pk)
        waiting = {"a", "b", "c"} - {holder} - set(done)
        assert {states[t] for t in waiting} <= {"scheduled"}, states
        with harness.engine.connect() as conn:
            assert pools.get_pool(conn, "one").occupied == 1
        (tmp_path / f"release-{holder}").touch()
        _until(harness, lambda h=holder: harness.states(pk)[h] == "success")
        done.append(holder)
    # The task outside the pool ran alongside all along.
    assert harness.states(pk)["free"] in ACTIVE
    (tmp_path / "release-free").touch()
    assert harness.run(pk)["state"] == "success"


def test_pool_slots_take_several_slots_and_a_missing_pool_holds_its_task(
    harness: DagHarness, write_dag: WriteDag, tmp_path: Path
) -> None:
    with harness.engine.begin() as conn:
        pools.set_pool(conn, "two", 2)
    tasks = _task("heavy", pool="two", pool_slots=2) + _task("light", pool="two")
    tasks += _task("orphan", pool="not_created_yet")
    write_dag("slots.py", SOURCE.format(folder=str(tmp_path), dag_id="slots", tasks=tasks))
    harness.parse()
    pk = harness.trigger("slots")
    harness.start()
    # heavy comes first (topological order) and takes both slots: light waits.
    _until(harness, lambda: "heavy" in _active(harness, pk))
    assert harness.states(pk)["light"] == "scheduled"
    assert harness.states(pk)["orphan"] == "scheduled"
    (tmp_path / "release-heavy").touch()
    _until(harness, lambda: "light" in _active(harness, pk))
    (tmp_path / "release-light").touch()
    _until(harness, lambda: harness.states(pk)["light"] == "success")
    assert harness.states(pk)["orphan"] == "scheduled"  # its pool does not exist
    with harness.engine.begin() as conn:
        pools.set_pool(conn, "not_created_yet", 1)
    harness.scheduler.wake()
    (tmp_path / "release-orphan").touch()
    assert harness.run(pk)["state"] == "success"


def test_max_active_tis_per_dag_caps_a_task_across_runs(
    harness: DagHarness, write_dag: WriteDag, tmp_path: Path
) -> None:
    tasks = _task("capped", max_active_tis_per_dag=1)
    write_dag("capped.py", SOURCE.format(folder=str(tmp_path), dag_id="capped", tasks=tasks))
    harness.parse()
    first, second = harness.trigger("capped"), harness.trigger("capped")
    harness.start()
    _until(harness, lambda: bool(_active(harness, first) | _active(harness, second)))
    running = [pk for pk in (first, second) if _active(harness, pk)]
    assert len(running) == 1
    other = second if running == [first] else first
    assert harness.states(other)["capped"] == "scheduled"
    (tmp_path / "release-capped").touch()
    assert harness.run(first)["state"] == "success"
    assert harness.run(second)["state"] == "success"


def test_default_pool_is_created_once_and_keeps_a_size_set_since(engine: Engine) -> None:
    with engine.begin() as conn:
        pools.ensure_default_pool(conn, 7)
        pools.ensure_default_pool(conn, 99)  # a second scheduler starting: no change
        assert pools.get_pool(conn, "default_pool").slots == 7
        pools.set_pool(conn, "default_pool", 3)
        pools.ensure_default_pool(conn, 128)
        assert pools.get_pool(conn, "default_pool").slots == 3


def test_dispatch_room_in_one_statement_agrees_with_each_pool_usage(engine: Engine) -> None:
    # Instances in several pools and states, some taking several slots; a pool that
    # counts deferred instances and one that does not; an instance of a missing pool.
    ids = [f"t{i}" for i in range(8)]
    dag = SerializedDag(
        dag_id="room",
        fileloc="/nowhere/room.py",
        schedule=SerializedSchedule(kind="none"),
        tasks=[SerializedTask(task_id=t, operator="Op") for t in ids],
    )
    with engine.begin() as conn:
        sync_parsed(
            conn, "/nowhere", [ParsedFile(path=dag.fileloc, dags={"room": dumps(dag)})], NOW
        )
    run_pk, _ = trigger_dag_run(engine, "room", {})
    placed = [
        ("t0", "default_pool", "running", 1),
        ("t1", "default_pool", "queued", 2),
        ("t2", "narrow", "running", 3),
        ("t3", "narrow", "deferred", 1),
        ("t4", "counted", "deferred", 2),
        ("t5", "counted", "queued", 1),
        ("t6", "gone", "running", 1),
        ("t7", "default_pool", "success", 5),
    ]
    with engine.begin() as conn:
        pools.ensure_default_pool(conn, 16)
        pools.set_pool(conn, "narrow", 4)
        pools.set_pool(conn, "counted", 5, include_deferred=True)
        pools.set_pool(conn, "idle", 2)
        for task_id, pool, state, slots in placed:
            conn.execute(
                update(TaskInstance)
                .where(TaskInstance.dag_run_id == run_pk, TaskInstance.task_id == task_id)
                .values(pool=pool, state=state, pool_slots=slots)
            )
        busy, unstarted, room = pools.room(conn)
        usage = pools.usage(conn)
    assert busy == 5  # queued or running, in any pool, the missing one too
    assert unstarted == 2  # t1 and t5: queued, no worker has started them
    assert room == {p.name: p.open for p in usage}
    assert room == {"counted": 2, "default_pool": 13, "idle": 2, "narrow": 1}
