"""Reading triggers as the CLI and the API show them: task, triggerer, lease and age."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, select

from tailrace.db.models import Job, TaskInstance, Trigger


def trigger_summaries(
    conn: Connection,
    now: datetime,
    lease_seconds: float,
    *,
    include_completed: bool = False,
    after: int | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """Triggers by id with the task instance waiting on them and their lease."""
    q = (
        select(
            Trigger.id,
            Trigger.classpath,
            Job.hostname,
            Job.pid,
            Job.latest_heartbeat,
            Trigger.created_at,
            Trigger.completed,
            Trigger.next_sequence,
            TaskInstance.dag_id,
            TaskInstance.task_id,
            TaskInstance.map_index,
            TaskInstance.run_id,
            TaskInstance.state,
        )
        .outerjoin(TaskInstance, TaskInstance.trigger_id == Trigger.id)
        .outerjoin(Job, Job.id == Trigger.triggerer_job_id)
        .order_by(Trigger.id)
    )
    if not include_completed:
        q = q.where(Trigger.completed.is_(False))
    if after is not None:
        q = q.where(Trigger.id > after)
    if limit is not None:
        q = q.limit(limit)
    lease = timedelta(seconds=lease_seconds)
    out = []
    for r in conn.execute(q):
        # A lease lasts while its triggerer heartbeats: it ends a lease after the last beat.
        lease_left = (
            None
            if r.latest_heartbeat is None
            else (r.latest_heartbeat + lease - now).total_seconds()
        )
        out.append(
            {
                "id": r.id,
                "trigger": r.classpath.rsplit(".", 1)[-1],
                "classpath": r.classpath,
                "dag_id": r.dag_id,
                "task_id": r.task_id,
                "map_index": r.map_index,
                "task": None
                if r.task_id is None
                else f"{r.dag_id}.{r.task_id}" + (f"[{r.map_index}]" if r.map_index >= 0 else ""),
                "run_id": r.run_id,
                "task_state": r.state,
                "triggerer": f"{r.hostname}:{r.pid}" if r.pid is not None else None,
                "lease_left_seconds": lease_left,
                "age_seconds": round((now - r.created_at).total_seconds(), 1),
                "events": r.next_sequence,
                "completed": r.completed,
            }
        )
    return out
