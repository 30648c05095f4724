"""Task output streams: items stored one row each, appended in order, read lazily."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Connection, delete, insert, select, update

from tailrace.db.models import Stream, StreamItem

RETURN_VALUE = "return_value"


def _stream_id(conn: Connection, ti_id: int, now: datetime) -> tuple[int, int]:
    row = conn.execute(
        select(Stream.id, Stream.length).where(
            Stream.task_instance_id == ti_id, Stream.key == RETURN_VALUE
        )
    ).first()
    if row is not None:
        return row.id, row.length
    stream_id: int = conn.execute(
        insert(Stream)
        .values(task_instance_id=ti_id, key=RETURN_VALUE, created_at=now)
        .returning(Stream.id)
    ).scalar_one()
    return stream_id, 0


def append_items(conn: Connection, ti_id: int, items: Sequence[str], now: datetime) -> None:
    """Append JSON-text items to the task instance's output stream."""
    stream_id, length = _stream_id(conn, ti_id, now)
    if items:
        conn.execute(
            insert(StreamItem),
            [
                {"stream_id": stream_id, "index": length + i, "value": value}
                for i, value in enumerate(items)
            ],
        )
        conn.execute(
            update(Stream).where(Stream.id == stream_id).values(length=length + len(items))
        )


def close_stream(conn: Connection, ti_id: int, now: datetime) -> None:
    stream_id, _ = _stream_id(conn, ti_id, now)
    conn.execute(update(Stream).where(Stream.id == stream_id).values(closed=True, closed_at=now))


def read_items(conn: Connection, ti_id: int, start: int = 0, limit: int = 1000) -> list[str]:
    """A page of a stream's items (JSON text), from index ``start``."""
    return list(
        conn.scalars(
            select(StreamItem.value)
            .join(Stream, Stream.id == StreamItem.stream_id)
            .where(
                Stream.task_instance_id == ti_id,
                Stream.key == RETURN_VALUE,
                StreamItem.index >= start,
            )
            .order_by(StreamItem.index)
            .limit(limit)
        )
    )


def reset_streams(conn: Connection, ti_ids: Sequence[int]) -> None:
    """Forget the output of earlier tries: a new try starts a fresh trigger run."""
    if ti_ids:
        stream_ids = select(Stream.id).where(Stream.task_instance_id.in_(list(ti_ids)))
        conn.execute(delete(StreamItem).where(StreamItem.stream_id.in_(stream_ids)))
        conn.execute(delete(Stream).where(Stream.task_instance_id.in_(list(ti_ids))))
