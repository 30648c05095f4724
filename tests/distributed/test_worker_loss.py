"""A Celery worker killed with ``kill -9`` (with its pool) costs seconds, not a retry.

A 200-task fan-out and a streaming run go on while workers are killed at several points;
their tasks have no retries and the default five-minute ``retry_delay``. The scheduler hears
the workers' heartbeats through the broker: the tries a dead worker was running are lost,
recorded in history and run again at once, without costing a retry; what it had taken but
not started goes back to the broker (ADR 0024). The try heartbeat timeout is set far
beyond the test's length, so only the broker's worker heartbeats can explain a recovery.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select

from tailrace.db.models import DagRun, TaskInstance, TaskInstanceHistory, XCom
from tailrace.state import TaskInstanceState as TIS
from tailrace.testing import run_cli, wait_for

from ._workload import recorded, stream, workload_dags
from .conftest import Cluster

WIDE = 200
EVENTS = 150
BATCHED = 150

DAG_IDS = ("loss_wide", "loss_stream")


def _running_on(engine: Engine, proc: subprocess.Popen[str]) -> set[tuple[int, int]]:
    """Tries running on this `tailrace worker` (its node name holds its pid)."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(TaskInstance.id, TaskInstance.try_number).where(
                TaskInstance.state == TIS.RUNNING,
                TaskInstance.worker_name.like(f"tailrace-{proc.pid}@%"),
            )
        )
        return {(r.id, r.try_number) for r in rows}


def _kill_busy_worker(cluster: Cluster, engine: Engine, name: str) -> set[tuple[int, int]]:
    """Kill a worker while it runs tries; returns them (a try may still end between
    the look and the kill: it then succeeded)."""
    proc = cluster.procs[name]
    running = wait_for(lambda: _running_on(engine, proc), timeout=60)
    cluster.kill(name)
    return running


def _not_successful(engine: Engine) -> str:
    """Every try of an instance that did not succeed, with its error: what a failed
    assertion on the runs' states needs to say."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(
                TaskInstance.dag_id,
                TaskInstance.task_id,
                TaskInstance.map_index,
                TaskInstanceHistory.try_number,
                TaskInstanceHistory.state,
                TaskInstanceHistory.error,
            )
            .outerjoin(TaskInstanceHistory, TaskInstanceHistory.task_instance_id == TaskInstance.id)
            .where(TaskInstance.state != TIS.SUCCESS)
            .order_by(TaskInstance.id, TaskInstanceHistory.try_number)
        ).all()
    return "\n".join(" ".join(str(v) for v in row) for row in rows)


def _finished(engine: Engine) -> dict[str, str] | None:
    with engine.connect() as conn:
        states = dict(conn.execute(select(DagRun.dag_id, DagRun.state)).all())
    done = len(states) == len(DAG_IDS) and all(s in ("success", "failed") for s in states.values())
    return states if done else None


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("db_backend", ["postgres"])
def test_kill_9_of_workers_during_a_fan_out_and_a_stream_loses_tries_not_minutes(
    cluster: Cluster, engine: Engine, dags_folder: Path, tmp_path: Path
) -> None:
    record = tmp_path / "executions.txt"
    record.touch()
    source = workload_dags(
        "loss",
        record,
        wide=WIDE,
        events=EVENTS,
        batched=BATCHED,
        pause=0.1,
        work_seconds=0.4,
        consume_seconds=0.1,
        batch_seconds=0.3,
    )
    (dags_folder / "loss.py").write_text(source)
    cluster.env["TAILRACE_TASK_HEARTBEAT_TIMEOUT"] = "3600"
    cluster.env["TAILRACE_WORKER_LOST_TIMEOUT"] = "6"
    cluster.start("api", "api-server")
    cluster.start("scheduler", "scheduler")
    cluster.start("triggerer", "triggerer")
    for name in ("worker-a", "worker-b"):
        cluster.start(name, "worker", "--concurrency", "2")
    for dag_id in DAG_IDS:
        triggered = run_cli(cluster.env, "dags", "trigger", dag_id)
        assert triggered.returncode == 0, triggered.stderr

    # Early, midway and late in the fan-out, a busy worker dies; another takes its place.
    killed: set[tuple[int, int]] = set()
    killed_workers: set[str] = set()
    for victim, replacement, after in (
        ("worker-a", "worker-c", 20),
        ("worker-b", "worker-d", WIDE // 2),
        ("worker-c", "worker-e", WIDE - 40),
    ):
        wait_for(lambda after=after: recorded(record, "work") >= after, timeout=240)
        killed_workers.add(f"tailrace-{cluster.procs[victim].pid}@")
        killed |= _kill_busy_worker(cluster, engine, victim)
        cluster.start(replacement, "worker", "--concurrency", "2")

    states = wait_for(lambda: _finished(engine), timeout=400)
    assert states == dict.fromkeys(DAG_IDS, "success"), (
        f"{_not_successful(engine)}\n{cluster.output()}"
    )

    # No try ran twice; every instance ended in exactly one successful execution; none
    # is left queued; the lost tries are in history, and cost no retry.
    executions = Counter(tuple(line.split()) for line in record.read_text().splitlines())
    assert [e for e, n in executions.items() if n > 1] == []
    with engine.connect() as conn:
        states_of = Counter(conn.scalars(select(TaskInstance.state)))
        successes = Counter(
            conn.scalars(
                select(TaskInstanceHistory.task_instance_id).where(
                    TaskInstanceHistory.state == TIS.SUCCESS
                )
            )
        )
        instances = conn.scalar(select(func.count()).select_from(TaskInstance))
        ended = {
            (r.task_instance_id, r.try_number): (r.state, r.error or "")
            for r in conn.execute(select(TaskInstanceHistory))
        }
        results = dict(
            conn.execute(select(XCom.map_index, XCom.value).where(XCom.task_id == "consume")).all()
        )
    assert set(states_of) == {TIS.SUCCESS}, states_of
    assert len(successes) == instances and set(successes.values()) == {1}
    # Each try running on a killed worker is in history: lost with it (or, killed a
    # moment too late, succeeded); the loss says why.
    lost = {t for t in killed if ended[t][0] == TIS.FAILED}
    assert lost, f"no try was running on the workers killed: {killed}"
    assert {ended[t][0] for t in killed} <= {TIS.FAILED, TIS.SUCCESS}
    assert all("stopped heartbeating through the broker" in ended[t][1] for t in lost)
    # And only the killed workers lost tries: a replacement's first tries, started before
    # the scheduler heard of it, are not taken for a dead worker's.
    losses = [e for s, e in ended.values() if "stopped heartbeating" in e]
    assert [e for e in losses if not any(w in e for w in killed_workers)] == []
    assert {int(k) for kind, k, _ in executions if kind == "work"} == set(range(WIDE))
    assert results == {i: str(i) for i in range(EVENTS)}
    assert stream(engine, "loss_stream", "batches") == [i * 10 for i in range(BATCHED)]
