"""Serialized DAG versions, read once per process: a version never changes once stored."""

from __future__ import annotations

import msgspec
from sqlalchemy import Connection, select

from tailrace.db.models import DagVersion
from tailrace.serialization import SerializedDag, SerializedTask, loads


class DagVersions:
    """A cache of ``DagVersion`` rows as ``(SerializedDag, fileloc)``, by version id."""

    def __init__(self) -> None:
        self._cache: dict[int, tuple[SerializedDag, str]] = {}

    def get(self, conn: Connection, version_id: int) -> tuple[SerializedDag, str]:
        cached = self._cache.get(version_id)
        if cached is None:
            row = conn.execute(
                select(DagVersion.data, DagVersion.fileloc).where(DagVersion.id == version_id)
            ).one()
            cached = (msgspec.convert(loads(row.data), SerializedDag), row.fileloc)
            self._cache[version_id] = cached
        return cached

    def task(self, conn: Connection, version_id: int, task_id: str) -> SerializedTask:
        """A ``TaskLookup``: the serialized task of a DAG version."""
        return self.get(conn, version_id)[0].task(task_id)
