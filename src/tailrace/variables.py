"""Variables stored in the metadata database: the CRUD the CLI, the API and a worker's
owner share, and the source that answers ``Variable.get`` where the database is at hand
(the triggerer, ``tailrace tasks test``).

Values are encrypted at rest with the deployment's Fernet keys, as connections' URIs
(and as Airflow does with its ``fernet_key``); ``tailrace rotate-fernet-key`` does not
re-encrypt them yet, so keep the old key after the new one.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import Connection as DbConnection
from sqlalchemy import Engine, delete, insert, select, update

from tailrace.connections import ConnectionDecryptionError, FernetKeys
from tailrace.db.models import Variable as VariableRow
from tailrace.sdk.variables import masked_value, set_variable_source

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoredVariable:
    key: str
    value: str
    description: str | None

    @property
    def masked_value(self) -> str:
        return masked_value(self.key, self.value)


_COLUMNS = (VariableRow.key, VariableRow.val, VariableRow.description, VariableRow.is_encrypted)


def _decrypt(key: str, val: str, is_encrypted: bool, keys: FernetKeys | None) -> str:
    if not is_encrypted:
        return val
    return (keys or FernetKeys.of_this_process()).decrypt(key, val, kind="variable")


def read_variable(conn: DbConnection, key: str, keys: FernetKeys | None = None) -> str | None:
    row = conn.execute(
        select(VariableRow.val, VariableRow.is_encrypted).where(VariableRow.key == key)
    ).first()
    return None if row is None else _decrypt(key, row.val, row.is_encrypted, keys)


def answer_variable(conn: DbConnection, key: str, keys: FernetKeys | None = None) -> str | None:
    """For a worker's ``GetVariable``: one that cannot be decrypted is logged and answered
    as missing, so the scheduler or api-server answering it carries on."""
    try:
        return read_variable(conn, key, keys)
    except ConnectionDecryptionError as exc:
        log.error("%s", exc)
        return None


def write_variable(
    conn: DbConnection,
    key: str,
    value: str,
    description: str | None = None,
    keys: FernetKeys | None = None,
) -> None:
    """Insert or replace ``key`` (its description too) on ``conn``'s transaction."""
    encrypted = (keys or FernetKeys.of_this_process()).encrypt(value)
    values = {"val": encrypted, "description": description, "is_encrypted": True}
    existing = conn.scalar(select(VariableRow.id).where(VariableRow.key == key).with_for_update())
    if existing is None:
        conn.execute(insert(VariableRow).values(key=key, **values))
    else:
        conn.execute(update(VariableRow).where(VariableRow.id == existing).values(**values))


def remove_variable(conn: DbConnection, key: str) -> bool:
    return conn.execute(delete(VariableRow).where(VariableRow.key == key)).rowcount > 0


def set_variable(
    engine: Engine,
    key: str,
    value: str,
    description: str | None = None,
    *,
    keys: FernetKeys | None = None,
) -> StoredVariable:
    with engine.begin() as conn:
        write_variable(conn, key, value, description, keys)
    return StoredVariable(key, value, description)


def find_variable(
    engine: Engine, key: str, keys: FernetKeys | None = None
) -> StoredVariable | None:
    with engine.connect() as conn:
        row = conn.execute(select(*_COLUMNS).where(VariableRow.key == key)).first()
    if row is None:
        return None
    return StoredVariable(key, _decrypt(key, row.val, row.is_encrypted, keys), row.description)


def list_variables(
    engine: Engine,
    *,
    after: str | None = None,
    limit: int | None = None,
    keys: FernetKeys | None = None,
) -> list[StoredVariable]:
    """In key order; ``after`` and ``limit`` page through them by key."""
    q = select(*_COLUMNS).order_by(VariableRow.key).limit(limit)
    if after is not None:
        q = q.where(VariableRow.key > after)
    keys = keys or FernetKeys.of_this_process()
    with engine.connect() as conn:
        return [
            StoredVariable(r.key, _decrypt(r.key, r.val, r.is_encrypted, keys), r.description)
            for r in conn.execute(q)
        ]


def delete_variable(engine: Engine, key: str) -> bool:
    """Whether there was such a variable."""
    with engine.begin() as conn:
        return remove_variable(conn, key)


def import_variables(
    engine: Engine, data: dict[str, object], *, keys: FernetKeys | None = None
) -> int:
    """Set every variable of ``data`` (a key → value mapping, as ``tailrace variables
    export`` and Airflow's ``variables export`` write it) in one transaction: a value that
    is not a string is stored as JSON. How many were set."""
    with engine.begin() as conn:
        for key, value in data.items():
            text = value if isinstance(value, str) else json.dumps(value)
            write_variable(conn, key, text, None, keys)
    return len(data)


def export_variables(engine: Engine, keys: FernetKeys | None = None) -> dict[str, object]:
    """Every stored variable, key → value; a value that is JSON is exported as that JSON
    (so ``import`` gives it back as it was), as Airflow does."""
    out: dict[str, object] = {}
    for stored in list_variables(engine, keys=keys):
        try:
            out[stored.key] = json.loads(stored.value)
        except ValueError:
            out[stored.key] = stored.value
    return out


class DatabaseVariables:
    """A variable source on the metadata database: for processes that have it."""

    def __init__(self, engine: Engine, keys: FernetKeys | None = None) -> None:
        self.engine = engine
        self.keys = keys

    def get(self, key: str) -> str | None:
        # Raises ConnectionDecryptionError: the caller's Variable.get fails with it.
        with self.engine.connect() as conn:
            return read_variable(conn, key, self.keys)

    def set(self, key: str, value: str, description: str | None) -> None:
        set_variable(self.engine, key, value, description, keys=self.keys)

    def delete(self, key: str) -> bool:
        return delete_variable(self.engine, key)


@contextmanager
def variables_from(engine: Engine) -> Iterator[None]:
    """``Variable`` in this process reads and writes ``engine``'s database for the block."""
    previous = set_variable_source(DatabaseVariables(engine))
    try:
        yield
    finally:
        set_variable_source(previous)
