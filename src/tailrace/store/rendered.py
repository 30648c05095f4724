"""Rendered templated fields (Airflow's ``rendered_task_instance_fields``): one row per try,
reported by the worker with the try's result."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.sql.dml import Insert

from tailrace.db.models import RenderedTaskInstanceFields as _Rendered


@dataclass(frozen=True)
class Rendering:
    ti_id: int
    try_number: int
    fields: dict[str, str]
    at: datetime


def _upsert(make: Callable[..., Any]) -> Insert:
    statement = make(_Rendered)
    upsert: Insert = statement.on_conflict_do_update(
        index_elements=[_Rendered.task_instance_id, _Rendered.try_number],
        set_={
            "rendered_fields": statement.excluded.rendered_fields,
            "created_at": statement.excluded.created_at,
        },
    )
    return upsert


# Built once: constructing the upsert cost more than running it (it is on every step that
# applies a finished try).
_UPSERT = {"postgresql": _upsert(pg_insert), "sqlite": _upsert(sqlite_insert)}


def record(conn: Connection, renderings: Sequence[Rendering]) -> None:
    """Keep each try's latest rendering: a deferred try that resumes renders again, and its
    row is replaced (one upsert for the batch)."""
    if not renderings:
        return
    conn.execute(
        _UPSERT["postgresql" if conn.dialect.name == "postgresql" else "sqlite"],
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
