"""Classic (eager) expansion of a mapped task once its upstream values exist.

The count comes from the database (literal lengths in the serialized DAG, stored XCom
lengths, or the number of a mapped upstream's results): no value is decoded and no user
code runs. ``.iterate()`` builds on the same insert path, incrementally.
"""

from __future__ import annotations

import math
from datetime import datetime

from sqlalchemy import Connection, func, insert, select, update

from tailrace.dagrun import ti_row
from tailrace.db.models import Stream, TaskInstance, XCom
from tailrace.scheduler._planner import TIRow
from tailrace.serialization import SerializedDag, SerializedTask
from tailrace.state import TaskInstanceState as TIS
from tailrace.streams import RETURN_VALUE


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
    where = (XCom.dag_run_id == run_id, XCom.task_id == spec.task_id, XCom.key == spec.key)
    if source.is_mapped:
        return int(conn.scalar(select(func.count()).select_from(XCom).where(*where)) or 0)
    row = conn.execute(select(XCom.length).where(*where, XCom.map_index == -1)).first()
    if row is None and spec.key == RETURN_VALUE:  # a streaming task: its stream, now closed
        row = conn.execute(
            select(Stream.length.label("length"))
            .join(TaskInstance, TaskInstance.id == Stream.task_instance_id)
            .where(
                TaskInstance.dag_run_id == run_id,
                TaskInstance.task_id == spec.task_id,
                TaskInstance.map_index == -1,
                Stream.key == RETURN_VALUE,
            )
        ).first()
    if row is None:
        raise ExpansionError(
            f"cannot expand task {task.task_id!r} over argument {arg!r}: task "
            f"{spec.task_id!r} pushed no XCom {spec.key!r} in this run"
        )
    if row.length is None:
        raise ExpansionError(
            f"cannot expand task {task.task_id!r} over argument {arg!r}: the XCom {spec.key!r} "
            f"of task {spec.task_id!r} is not a list or dict; return a list to map over"
        )
    return int(row.length)


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
    """Turn the placeholder into instances 0..n-1; returns the run's updated rows."""
    task = dag.task(placeholder.task_id)
    try:
        count = math.prod(_length(conn, run_id, dag, task, arg) for arg in task.expand)
    except ExpansionError as exc:
        conn.execute(
            update(TaskInstance)
            .where(TaskInstance.id == placeholder.id)
            .values(state=TIS.FAILED, error=str(exc), end_date=now, updated_at=now)
        )
        placeholder.state = TIS.FAILED
        return rows
    if count == 0:
        conn.execute(
            update(TaskInstance)
            .where(TaskInstance.id == placeholder.id)
            .values(state=TIS.SKIPPED, end_date=now, updated_at=now)
        )
        placeholder.state = TIS.SKIPPED
        return rows
    conn.execute(update(TaskInstance).where(TaskInstance.id == placeholder.id).values(map_index=0))
    placeholder.map_index = 0
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
