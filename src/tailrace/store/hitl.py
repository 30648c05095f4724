"""Human-in-the-loop requests and responses (Airflow 3.1's ``hitl_detail``): a deferred
task instance's question, written by its trigger, and the one answer it gets."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, insert, select, update

from tailrace.db.models import HITLDetail, TaskInstance


def find_ti(conn: Connection, dag_id: str, run_id: str, task_id: str, map_index: int) -> int | None:
    return conn.scalar(
        select(TaskInstance.id).where(
            TaskInstance.dag_id == dag_id,
            TaskInstance.run_id == run_id,
            TaskInstance.task_id == task_id,
            TaskInstance.map_index == map_index,
        )
    )


def ask(
    conn: Connection,
    ti_id: int,
    *,
    subject: str,
    body: str | None,
    options: Sequence[str],
    defaults: Sequence[str] | None,
    multiple: bool,
    params: Mapping[str, Any],
    now: datetime,
) -> None:
    """Record the request. A trigger started again after a failover finds it as it was; a
    new try of the task (cleared, retried) asks afresh, as in Airflow: the request of an
    earlier try is replaced and its response, if any, dropped."""
    request = {
        "subject": subject,
        "body": body,
        "options": list(options),
        "defaults": None if defaults is None else list(defaults),
        "multiple": multiple,
        "params": dict(params),
        "created_at": now,
    }
    found = conn.execute(
        select(HITLDetail.created_at, TaskInstance.start_date)
        .join(TaskInstance, TaskInstance.id == HITLDetail.ti_id)
        .where(HITLDetail.ti_id == ti_id)
    ).first()
    if found is None:
        conn.execute(insert(HITLDetail).values(ti_id=ti_id, **request))
    elif found.start_date is not None and found.created_at < found.start_date:
        response = dict.fromkeys(("responded_at", "responded_by", "chosen_options", "params_input"))
        conn.execute(
            update(HITLDetail).where(HITLDetail.ti_id == ti_id).values(**request, **response)
        )


def answer(
    conn: Connection,
    ti_id: int,
    chosen_options: Sequence[str],
    params_input: Mapping[str, Any],
    responded_by: str | None,
    now: datetime,
) -> bool:
    """Record the response unless there is one already; False if there was."""
    done = conn.execute(
        update(HITLDetail)
        .where(HITLDetail.ti_id == ti_id, HITLDetail.responded_at.is_(None))
        .values(
            chosen_options=list(chosen_options),
            params_input=dict(params_input),
            responded_by=responded_by,
            responded_at=now,
        )
    )
    return done.rowcount == 1


_COLUMNS = (
    TaskInstance.dag_id,
    TaskInstance.run_id,
    TaskInstance.task_id,
    TaskInstance.map_index,
    TaskInstance.state,
    HITLDetail,
)


def _as_dict(row: Any) -> dict[str, Any]:
    return {
        "ti_id": row.ti_id,
        "dag_id": row.dag_id,
        "dag_run_id": row.run_id,
        "task_id": row.task_id,
        "map_index": row.map_index,
        "task_instance_state": row.state,
        "subject": row.subject,
        "body": row.body,
        "options": row.options,
        "defaults": row.defaults,
        "multiple": row.multiple,
        "params": row.params,
        "created_at": row.created_at,
        "responded_at": row.responded_at,
        "responded_by": row.responded_by,
        "chosen_options": row.chosen_options,
        "params_input": row.params_input or {},
        "response_received": row.responded_at is not None,
    }


def detail(conn: Connection, ti_id: int) -> dict[str, Any] | None:
    row = conn.execute(
        select(*_COLUMNS)
        .join(TaskInstance, TaskInstance.id == HITLDetail.ti_id)
        .where(HITLDetail.ti_id == ti_id)
    ).first()
    return None if row is None else _as_dict(row)


def details(
    conn: Connection, *, dag_id: str | None, response_received: bool | None, limit: int
) -> list[dict[str, Any]]:
    """Requests, oldest first (of one DAG; only those answered, or not)."""
    query = select(*_COLUMNS).join(TaskInstance, TaskInstance.id == HITLDetail.ti_id)
    if dag_id is not None:
        query = query.where(TaskInstance.dag_id == dag_id)
    if response_received is not None:
        query = query.where(
            HITLDetail.responded_at.is_not(None)
            if response_received
            else HITLDetail.responded_at.is_(None)
        )
    rows = conn.execute(query.order_by(HITLDetail.created_at, HITLDetail.ti_id).limit(limit))
    return [_as_dict(r) for r in rows]
