"""Connections stored in the metadata database: the CRUD the CLI and the API share, and
the lookups that answer a worker's ``GetConnection`` and a trigger's ``get_connection``
in the triggerer.

URIs are encrypted at rest with Fernet, as Airflow does with its ``fernet_key``: the
setting holds comma-separated keys, the first encrypts and any decrypts, so a key is
rotated by putting the new one first, running :func:`rotate_fernet_key`
(``tailrace rotate-fernet-key``) and then dropping the old one. Without the setting the
key is ``$TAILRACE_HOME/fernet.key``, made (mode 0600) the first time a connection is
written. Rows from before encryption (``is_encrypted`` false) are read as they are.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from sqlalchemy import Connection as DbConnection
from sqlalchemy import Engine, Row, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from tailrace.config import Settings, load_settings
from tailrace.db.models import Connection as ConnectionRow
from tailrace.errors import ConnectionExistsError, InvalidConnectionUriError
from tailrace.sdk.connections import Connection, mask_url, set_connection_source
from tailrace.sdk.errors import TailraceError

KEY_FILE_NAME = "fernet.key"

log = logging.getLogger(__name__)


class ConnectionDecryptionError(TailraceError):
    """A stored connection cannot be decrypted with the keys this process has."""

    def __init__(self, conn_id: str, source: str, *, kind: str = "connection") -> None:
        self.conn_id = conn_id
        super().__init__(
            f"{kind} {conn_id!r} is encrypted with a key that is not among this "
            f"process's Fernet keys ({source}); set fernet_key (TAILRACE_FERNET_KEY) to the "
            "same keys on every scheduler, triggerer and api-server, old keys after the new "
            "one until `tailrace rotate-fernet-key` has run"
        )


class FernetKeys:
    """The deployment's Fernet keys: ``fernet_key``, else the key file in its home."""

    def __init__(self, fernet_key: str | None, key_file: Path) -> None:
        self._setting = fernet_key
        self._key_file = key_file
        self._multi: MultiFernet | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> FernetKeys:
        return cls(settings.fernet_key, settings.home / KEY_FILE_NAME)

    @classmethod
    def of_this_process(cls) -> FernetKeys:
        """From this process's environment and config file, as every component loads them."""
        return cls.from_settings(load_settings())

    @property
    def source(self) -> str:
        return "fernet_key" if self._setting else str(self._key_file)

    def encrypt(self, text: str) -> str:
        return self._keys(create=True).encrypt(text.encode()).decode()

    def decrypt(self, conn_id: str, token: str, *, kind: str = "connection") -> str:
        try:
            return self._keys(create=False).decrypt(token.encode()).decode()
        except (InvalidToken, FileNotFoundError):
            raise ConnectionDecryptionError(conn_id, self.source, kind=kind) from None

    def rotate(self, conn_id: str, token: str) -> str:
        try:
            return self._keys(create=False).rotate(token.encode()).decode()
        except (InvalidToken, FileNotFoundError):
            raise ConnectionDecryptionError(conn_id, self.source) from None

    def _keys(self, *, create: bool) -> MultiFernet:
        if self._multi is None:
            text = self._setting or self._read_key_file(create=create)
            self._multi = MultiFernet([Fernet(k.strip()) for k in text.split(",") if k.strip()])
        return self._multi

    def _read_key_file(self, *, create: bool) -> str:
        if create and not self._key_file.exists():
            self._key_file.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(self._key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:  # another process made it first: use theirs
                pass
            else:
                with os.fdopen(fd, "w") as f:
                    f.write(Fernet.generate_key().decode() + "\n")
        return self._key_file.read_text().strip()


@dataclass(frozen=True)
class StoredConnection:
    conn_id: str
    uri: str
    description: str | None

    @property
    def masked_uri(self) -> str:
        return mask_url(self.uri, extras=True)


_COLUMNS = (
    ConnectionRow.conn_id,
    ConnectionRow.uri,
    ConnectionRow.description,
    ConnectionRow.is_encrypted,
)


def _stored(row: Row[str, str, str | None, bool], keys: FernetKeys) -> StoredConnection:
    conn_id, uri, description, is_encrypted = row
    return StoredConnection(
        conn_id, keys.decrypt(conn_id, uri) if is_encrypted else uri, description
    )


def connection_uri(conn: DbConnection, conn_id: str, keys: FernetKeys | None = None) -> str | None:
    """The stored URI, for a worker's ``GetConnection``: one that cannot be decrypted is
    logged (naming the connection and ``fernet_key``) and answered as missing, so the
    scheduler or api-server answering it carries on."""
    try:
        return _stored_uri(conn, conn_id, keys)
    except ConnectionDecryptionError as exc:
        log.error("%s", exc)
        return None


def _stored_uri(conn: DbConnection, conn_id: str, keys: FernetKeys | None) -> str | None:
    row = conn.execute(
        select(ConnectionRow.uri, ConnectionRow.is_encrypted).where(
            ConnectionRow.conn_id == conn_id
        )
    ).first()
    if row is None:
        return None
    if not row.is_encrypted:
        return str(row.uri)
    return (keys or FernetKeys.of_this_process()).decrypt(conn_id, row.uri)


def add_connection(
    engine: Engine,
    conn_id: str,
    uri: str,
    description: str | None = None,
    *,
    replace: bool = False,
    keys: FernetKeys | None = None,
) -> StoredConnection:
    try:
        Connection.from_uri(conn_id, uri)  # a malformed URI (a bad port) fails here, not in a task
    except ValueError as exc:
        raise InvalidConnectionUriError(conn_id, str(exc)) from None
    encrypted = (keys or FernetKeys.of_this_process()).encrypt(uri)
    try:
        with engine.begin() as conn:
            existing = conn.scalar(select(ConnectionRow.id).where(ConnectionRow.conn_id == conn_id))
            if existing is not None and not replace:
                raise ConnectionExistsError(conn_id)
            if existing is not None:
                conn.execute(delete(ConnectionRow).where(ConnectionRow.id == existing))
            conn.execute(
                insert(ConnectionRow).values(
                    conn_id=conn_id, uri=encrypted, description=description, is_encrypted=True
                )
            )
    except IntegrityError:  # another writer added it since the check
        raise ConnectionExistsError(conn_id) from None
    return StoredConnection(conn_id, uri, description)


def find_connection(
    engine: Engine, conn_id: str, keys: FernetKeys | None = None
) -> StoredConnection | None:
    with engine.connect() as conn:
        row = conn.execute(select(*_COLUMNS).where(ConnectionRow.conn_id == conn_id)).first()
    return None if row is None else _stored(row, keys or FernetKeys.of_this_process())


def list_connections(
    engine: Engine,
    *,
    after: str | None = None,
    limit: int | None = None,
    keys: FernetKeys | None = None,
) -> list[StoredConnection]:
    """In id order; ``after`` and ``limit`` page through them by key."""
    q = select(*_COLUMNS).order_by(ConnectionRow.conn_id).limit(limit)
    if after is not None:
        q = q.where(ConnectionRow.conn_id > after)
    keys = keys or FernetKeys.of_this_process()
    with engine.connect() as conn:
        return [_stored(row, keys) for row in conn.execute(q)]


def rotate_fernet_key(engine: Engine, keys: FernetKeys | None = None) -> int:
    """Re-encrypt every stored connection with the first key (plain-text rows from before
    encryption too), in one transaction; how many rows were written."""
    keys = keys or FernetKeys.of_this_process()
    with engine.begin() as conn:
        rows = conn.execute(
            select(ConnectionRow.id, ConnectionRow.conn_id, *_COLUMNS[1:]).with_for_update()
        ).all()
        for row in rows:
            uri = keys.rotate(row.conn_id, row.uri) if row.is_encrypted else keys.encrypt(row.uri)
            conn.execute(
                update(ConnectionRow)
                .where(ConnectionRow.id == row.id)
                .values(uri=uri, is_encrypted=True)
            )
    return len(rows)


def delete_connection(engine: Engine, conn_id: str) -> bool:
    """Whether there was such a connection."""
    with engine.begin() as conn:
        result = conn.execute(delete(ConnectionRow).where(ConnectionRow.conn_id == conn_id))
        return result.rowcount > 0


class DatabaseConnections:
    """A connection source reading the metadata database: for processes that have it."""

    def __init__(self, engine: Engine, keys: FernetKeys | None = None) -> None:
        self.engine = engine
        self.keys = keys

    def __call__(self, conn_id: str) -> str | None:
        # Raises ConnectionDecryptionError: the caller's get_connection fails with it.
        with self.engine.connect() as conn:
            return _stored_uri(conn, conn_id, self.keys)


@contextmanager
def connections_from(engine: Engine) -> Iterator[None]:
    """``get_connection`` in this process reads ``engine``'s database for the block."""
    previous = set_connection_source(DatabaseConnections(engine))
    try:
        yield
    finally:
        set_connection_source(previous)
