"""Component jobs: each scheduler and triggerer registers and heartbeats.

Work a component owns is marked with its job id; when a job stops heartbeating, another
component treats that work as orphaned and takes it over.
"""

from __future__ import annotations

import os
import socket
from datetime import datetime, timedelta

from sqlalchemy import Connection, insert, select, update

from tailrace.db.models import Job

# A job silent for four heartbeat intervals is dead.
MISSED_HEARTBEATS = 4


def register(conn: Connection, job_type: str, now: datetime) -> int:
    job_id: int = conn.execute(
        insert(Job)
        .values(
            job_type=job_type,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            state="running",
            start_date=now,
            latest_heartbeat=now,
        )
        .returning(Job.id)
    ).scalar_one()
    return job_id


def heartbeat(conn: Connection, job_id: int, now: datetime) -> None:
    conn.execute(update(Job).where(Job.id == job_id).values(latest_heartbeat=now))


def finish(conn: Connection, job_id: int) -> None:
    conn.execute(update(Job).where(Job.id == job_id).values(state="stopped"))


def live_job_ids(
    conn: Connection, job_type: str, now: datetime, heartbeat_seconds: float
) -> set[int]:
    silence = timedelta(seconds=MISSED_HEARTBEATS * heartbeat_seconds)
    return set(
        conn.scalars(
            select(Job.id).where(
                Job.job_type == job_type,
                Job.state == "running",
                Job.latest_heartbeat > now - silence,
            )
        )
    )


def describe(conn: Connection, job_id: int | None) -> str:
    if job_id is None:
        return "an unknown component"
    row = conn.execute(select(Job.job_type, Job.hostname, Job.pid).where(Job.id == job_id)).first()
    if row is None:
        return f"job {job_id}"
    return f"{row.job_type} job {job_id} (pid {row.pid} on {row.hostname})"
