"""Connections stored in the metadata database: the CRUD the CLI and the API share, and
the lookups that answer a worker's ``GetConnection`` and a trigger's ``get_connection``
in the triggerer."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import Connection as DbConnection
from sqlalchemy import Engine, delete, insert, select
from sqlalchemy.exc import IntegrityError

from tailrace.db.models import Connection as ConnectionRow
from tailrace.errors import ConnectionExistsError, InvalidConnectionUriError
from tailrace.sdk.connections import Connection, mask_url, set_connection_source


@dataclass(frozen=True)
class StoredConnection:
    conn_id: str
    uri: str
    description: str | None

    @property
    def masked_uri(self) -> str:
        return mask_url(self.uri, extras=True)


_COLUMNS = (ConnectionRow.conn_id, ConnectionRow.uri, ConnectionRow.description)


def connection_uri(conn: DbConnection, conn_id: str) -> str | None:
    uri: str | None = conn.scalar(select(ConnectionRow.uri).where(ConnectionRow.conn_id == conn_id))
    return uri


def add_connection(
    engine: Engine, conn_id: str, uri: str, description: str | None = None, *, replace: bool = False
) -> StoredConnection:
    try:
        Connection.from_uri(conn_id, uri)  # a malformed URI (a bad port) fails here, not in a task
    except ValueError as exc:
        raise InvalidConnectionUriError(conn_id, str(exc)) from None
    try:
        with engine.begin() as conn:
            existing = conn.scalar(select(ConnectionRow.id).where(ConnectionRow.conn_id == conn_id))
            if existing is not None and not replace:
                raise ConnectionExistsError(conn_id)
            if existing is not None:
                conn.execute(delete(ConnectionRow).where(ConnectionRow.id == existing))
            conn.execute(
                insert(ConnectionRow).values(conn_id=conn_id, uri=uri, description=description)
            )
    except IntegrityError:  # another writer added it since the check
        raise ConnectionExistsError(conn_id) from None
    return StoredConnection(conn_id, uri, description)


def find_connection(engine: Engine, conn_id: str) -> StoredConnection | None:
    with engine.connect() as conn:
        row = conn.execute(select(*_COLUMNS).where(ConnectionRow.conn_id == conn_id)).first()
    return None if row is None else StoredConnection(*row)


def list_connections(
    engine: Engine, *, after: str | None = None, limit: int | None = None
) -> list[StoredConnection]:
    """In id order; ``after`` and ``limit`` page through them by key."""
    q = select(*_COLUMNS).order_by(ConnectionRow.conn_id).limit(limit)
    if after is not None:
        q = q.where(ConnectionRow.conn_id > after)
    with engine.connect() as conn:
        return [StoredConnection(*row) for row in conn.execute(q)]


def delete_connection(engine: Engine, conn_id: str) -> bool:
    """Whether there was such a connection."""
    with engine.begin() as conn:
        result = conn.execute(delete(ConnectionRow).where(ConnectionRow.conn_id == conn_id))
        return result.rowcount > 0


class DatabaseConnections:
    """A connection source reading the metadata database: for processes that have it."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def __call__(self, conn_id: str) -> str | None:
        with self.engine.connect() as conn:
            return connection_uri(conn, conn_id)


@contextmanager
def connections_from(engine: Engine) -> Iterator[None]:
    """``get_connection`` in this process reads ``engine``'s database for the block."""
    previous = set_connection_source(DatabaseConnections(engine))
    try:
        yield
    finally:
        set_connection_source(previous)
