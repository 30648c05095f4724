"""A try's log never takes its worker down: long ids fit the filesystem, and a log that
cannot be written costs the log, not the worker or the tasks queued behind it."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tailrace.dagrun import trigger_dag_run
from tailrace.execution import log_path_for
from tailrace.testing import DagHarness

WriteDag = Callable[[str, str], Path]

NAME_MAX = 255

TWO_TASKS = """
from datetime import datetime
from tailrace import dag, task

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def long_ids():
    @task
    def first():
        print("first ran")
        return 1

    @task
    def second(value):
        print("second ran")
        return value + 1

    second(first())

long_ids()
"""


def _components(path: Path, root: Path) -> list[bytes]:
    return [os.fsencode(part) for part in path.relative_to(root).parts]


@pytest.mark.parametrize(
    ("dag_id", "run_id", "task_id"),
    [
        ("d" * 250, "r" * 249, "t" * 250),
        ("dag", "é" * 250, "task"),  # 500 bytes in UTF-8
        ("dag", "manual__2026-01-01T00:00:00+00:00", "group.task"),
    ],
)
def test_every_part_of_a_log_path_fits_a_file_name(
    tmp_path: Path, dag_id: str, run_id: str, task_id: str
) -> None:
    path = log_path_for(tmp_path, dag_id, run_id, task_id, 3, 2)
    assert all(len(part) <= NAME_MAX for part in _components(path, tmp_path))
    path.parent.mkdir(parents=True)
    path.write_text("fits\n")
    assert path.read_text() == "fits\n"


def test_short_parts_are_kept_and_long_ones_stay_distinct(tmp_path: Path) -> None:
    short = log_path_for(tmp_path, "etl", "manual__1", "load", -1, 1)
    assert short == tmp_path / "dag_id=etl" / "run_id=manual__1" / "task_id=load" / "attempt=1.log"
    long_a = log_path_for(tmp_path, "etl", "x" * 248 + "a", "load", -1, 1)
    long_b = log_path_for(tmp_path, "etl", "x" * 248 + "b", "load", -1, 1)
    assert long_a != long_b
    # Readable: the hashed part still starts with the id.
    assert long_a.parent.parent.name.startswith("run_id=xxxxxxxx")


def test_a_249_character_run_id_runs_and_leaves_the_workers_alone(
    engine: object, dags_folder: Path, write_dag: WriteDag, tmp_path: Path
) -> None:
    write_dag("long_ids.py", TWO_TASKS)
    # One worker: the next run's tasks go to the worker that ran the long run's.
    with DagHarness(engine, dags_folder, log_folder=tmp_path / "logs", processes=1) as h:  # type: ignore[arg-type]
        h.parse()
        h.start()
        pids = list(h.executor.worker_pids)
        long_pk, _ = trigger_dag_run(h.engine, "long_ids", {}, run_id="r" * 249)
        other_pk, _ = trigger_dag_run(h.engine, "long_ids", {}, run_id="other")
        h.scheduler.wake()
        assert h.run(long_pk)["state"] == "success"
        assert h.run(other_pk)["state"] == "success"
        assert "first ran" in h.log(long_pk, "first")
        assert "second ran" in h.log(long_pk, "second")
        assert h.executor.worker_pids == pids


def test_a_log_folder_that_cannot_be_written_costs_the_log_not_the_worker(
    engine: object, dags_folder: Path, write_dag: WriteDag, tmp_path: Path
) -> None:
    write_dag("long_ids.py", TWO_TASKS)
    blocked = tmp_path / "logs"
    blocked.write_text("a file where the log folder should be\n")
    with DagHarness(engine, dags_folder, log_folder=blocked, processes=1) as h:  # type: ignore[arg-type]
        h.parse()
        h.start()
        pids = list(h.executor.worker_pids)
        assert h.trigger_and_run("long_ids")["state"] == "success"
        assert h.trigger_and_run("long_ids")["state"] == "success"
        assert h.executor.worker_pids == pids
