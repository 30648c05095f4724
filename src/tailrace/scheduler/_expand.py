"""Classic (eager) expansion of a mapped task once its upstream values exist.

The count comes from the database (literal lengths in the serialized DAG, stored XCom
lengths, or the number of a mapped upstream's results): no value is decoded and no user
code runs. ``.iterate()`` builds on the same insert path, incrementally.
"""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import datetime

from sqlalchemy import Connection, func, insert, select, update

from tailrace import transitions
from tailrace.dagrun import ti_row
from tailrace.db.models import TaskInstance, XCom
from tailrace.scheduler._iterate import Sources
from tailrace.scheduler._planner import TIRow
from tailrace.serialization import SerializedDag, SerializedTask
from tailrace.state import TaskInstanceState as TIS


class ExpansionError(Exception):
    pass


def _length(
    conn: Connection, run_id: int, dag: SerializedDag, task: SerializedTask, arg: str
) -> int:
    spec = task.expand[arg]
    if spec.literal_length is not None:
        return spec.literal_length
    assert spec.task_id is not None
    source = dag.task(spec.task_id)
    if source.is_mapped:  # one item per instance that pushed the value
        where = (XCom.dag_run_id == run_id, XCom.task_id == spec.task_id, XCom.key == spec.key)
        return int(conn.scalar(select(func.count()).select_from(XCom).where(*where)) or 0)
    # A list XCom's stored length, or a streaming task's (closed) stream: as .iterate()
    # counts them.
    available = Sources(conn, run_id, dag.task).available(spec.task_id, spec.key)
    if available.error is not None or available.failed:
        reason = available.error or f"task {spec.task_id!r} failed"
        raise ExpansionError(f"cannot expand task {task.task_id!r} over argument {arg!r}: {reason}")
    return available.length


def expand_mapped(
    conn: Connection,
    run_id: int,
    dag_id: str,
    run_key: str,
    dag: SerializedDag,
    placeholder: TIRow,
    rows: list[TIRow],
    now: datetime,
) -> list[TIRow]:
    """Turn the placeholder into instances 0..n-1; returns the run's updated rows (new
    rows: the pass may keep the old ones between steps, ADR 0046)."""
    task = dag.task(placeholder.task_id)
    try:
        count = math.prod(_length(conn, run_id, dag, task, arg) for arg in task.expand)
    except ExpansionError as exc:
        transitions.finish_placeholder(conn, placeholder.id, TIS.FAILED, now, error=str(exc))
        return _replaced(rows, replace(placeholder, state=TIS.FAILED))
    if count == 0:
        transitions.finish_placeholder(conn, placeholder.id, TIS.SKIPPED, now)
        return _replaced(rows, replace(placeholder, state=TIS.SKIPPED))
    conn.execute(update(TaskInstance).where(TaskInstance.id == placeholder.id).values(map_index=0))
    rows = _replaced(rows, replace(placeholder, map_index=0))
    if count > 1:
        conn.execute(
            insert(TaskInstance),
            [ti_row(run_id, dag_id, run_key, task, i, now) for i in range(1, count)],
        )
        new = conn.execute(
            select(TaskInstance.id, TaskInstance.map_index).where(
                TaskInstance.dag_run_id == run_id,
                TaskInstance.task_id == task.task_id,
                TaskInstance.map_index > 0,
            )
        ).all()
        rows = rows + [
            TIRow(
                id=r.id,
                task_id=task.task_id,
                map_index=r.map_index,
                state=None,
                max_tries=task.retries,
            )
            for r in new
        ]
    return rows


def _replaced(rows: list[TIRow], row: TIRow) -> list[TIRow]:
    return [row if r.id == row.id else r for r in rows]
