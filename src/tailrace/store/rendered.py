"""Rendered templated fields (Airflow's ``rendered_task_instance_fields``): one row per try,
reported by the worker with the try's result."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from tailrace.db.models import RenderedTaskInstanceFields as _Rendered


@dataclass(frozen=True)
class Rendering:
    ti_id: int
    try_number: int
    fields: dict[str, str]
    at: datetime


def record(conn: Connection, renderings: Sequence[Rendering]) -> None:
    """Keep each try's latest rendering: a deferred try that resumes renders again, and its
    row is replaced (one upsert for the batch)."""
    if not renderings:
        return
    make = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    statement = make(_Rendered)
    conn.execute(
        statement.on_conflict_do_update(
            index_elements=[_Rendered.task_instance_id, _Rendered.try_number],
            set_={
                "rendered_fields": statement.excluded.rendered_fields,
                "created_at": statement.excluded.created_at,
            },
        ),
        [
            {
                "task_instance_id": r.ti_id,
                "try_number": r.try_number,
                "rendered_fields": r.fields,
                "created_at": r.at,
            }
            for r in renderings
        ],
    )
