"""Looking up the rows a route names, or answering 404."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel
from sqlalchemy import Connection, select

from tailrace.api.errors import NotFound
from tailrace.db.models import Dag, DagRun, TaskInstance

M = TypeVar("M", bound=BaseModel)


def to_model(model: type[M], row: Any, **extra: Any) -> M:
    """``model`` from the row's columns that it has fields for."""
    mapping = row._mapping
    values = {name: mapping[name] for name in model.model_fields if name in mapping}
    return model(**{**values, **extra})


def require_dag(conn: Connection, dag_id: str) -> None:
    if conn.scalar(select(Dag.dag_id).where(Dag.dag_id == dag_id)) is None:
        raise NotFound(f"DAG {dag_id!r} is not known; see GET /api/v1/dags")


def run_row(conn: Connection, dag_id: str, run_id: str) -> Any:
    row = conn.execute(
        select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id)
    ).first()
    if row is None:
        raise NotFound(f"DAG {dag_id!r} has no run {run_id!r}")
    return row


def task_instance_row(
    conn: Connection, dag_id: str, run_id: str, task_id: str, map_index: int
) -> Any:
    row = conn.execute(
        select(TaskInstance).where(
            TaskInstance.dag_id == dag_id,
            TaskInstance.run_id == run_id,
            TaskInstance.task_id == task_id,
            TaskInstance.map_index == map_index,
        )
    ).first()
    if row is None:
        where = f"{dag_id}.{task_id}" + (f"[{map_index}]" if map_index >= 0 else "")
        raise NotFound(f"run {run_id!r} has no task instance {where}")
    return row


def require_task(conn: Connection, dag_id: str, run_id: str, task_id: str) -> None:
    found = conn.scalar(
        select(TaskInstance.id)
        .where(
            TaskInstance.dag_id == dag_id,
            TaskInstance.run_id == run_id,
            TaskInstance.task_id == task_id,
        )
        .limit(1)
    )
    if found is None:
        raise NotFound(f"run {run_id!r} of DAG {dag_id!r} has no task {task_id!r}")
