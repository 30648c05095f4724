"""SqlHook: SQLAlchemy engines for a connection, queries, and idempotent batch upserts."""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection as DbConnection
from sqlalchemy import Engine, MetaData, Table, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, NoSuchTableError, StatementError
from sqlalchemy.sql.dml import Insert

from tailrace.providers.errors import ProviderError, RowError
from tailrace.sdk.connections import get_connection, mask_secret, mask_url

log = logging.getLogger("tailrace.providers.sql")

# Connection URIs name databases; SQLAlchemy also wants the driver we ship with.
_DRIVERS = {
    "postgres": "postgresql+psycopg",
    "postgresql": "postgresql+psycopg",
    "mysql": "mysql+pymysql",
    "mariadb": "mariadb+pymysql",
}


def sqlalchemy_url(uri: str) -> str:
    """``uri`` with the driver Tailrace installs for its database (``postgresql://`` →
    ``postgresql+psycopg://``, ``mysql://`` → ``mysql+pymysql://``)."""
    scheme, sep, rest = uri.partition("://")
    return f"{_DRIVERS.get(scheme, scheme)}{sep}{rest}"


def jsonable(value: Any) -> Any:
    """A database value as JSON can hold it (for XComs and stream items)."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return value


def _database_message(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    return " ".join(str(orig).split())[:500]


class SqlHook:
    """Runs SQL on the database of the connection ``conn_id`` (or the SQLAlchemy ``url``):
    PostgreSQL, SQLite or MySQL/MariaDB (``pip install tailrace[mysql]``).

    The engine is created on first use and kept for the hook's life; its password is
    masked in logs.
    """

    def __init__(
        self,
        conn_id: str | None = None,
        *,
        url: str | None = None,
        engine_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        if (conn_id is None) == (url is None):
            raise ValueError("SqlHook needs exactly one of conn_id and url")
        self.conn_id = conn_id
        self.url = url
        self.engine_kwargs = dict(engine_kwargs or {})
        self._engine: Engine | None = None

    def get_url(self) -> str:
        if self.url is not None:
            mask_secret(make_url(sqlalchemy_url(self.url)).password)
            return sqlalchemy_url(self.url)
        assert self.conn_id is not None
        return sqlalchemy_url(get_connection(self.conn_id).uri)

    @property
    def masked_url(self) -> str:
        return mask_url(self.get_url())

    def get_engine(self) -> Engine:
        if self._engine is None:
            self._engine = create_engine(self.get_url(), **self.engine_kwargs)
        return self._engine

    def dispose(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    # -- queries ------------------------------------------------------------------------

    def run(
        self, sql: str | Sequence[str], parameters: Mapping[str, Any] | None = None
    ) -> list[list[dict[str, Any]] | None]:
        """Run the statements in one transaction; for each, its rows (``None`` for a
        statement that returns none), values made JSON-safe."""
        statements = [sql] if isinstance(sql, str) else list(sql)
        results: list[list[dict[str, Any]] | None] = []
        with self.get_engine().begin() as conn:
            for statement in statements:
                result = conn.execute(text(statement), dict(parameters or {}))
                if result.returns_rows:
                    results.append(
                        [{k: jsonable(v) for k, v in row.items()} for row in result.mappings()]
                    )
                else:
                    results.append(None)
        return results

    def get_records(
        self, sql: str, parameters: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        return self.run(sql, parameters)[0] or []

    def get_first(self, sql: str, parameters: Mapping[str, Any] | None = None) -> Any:
        """The first column of the first row (``None`` without rows)."""
        rows = self.get_records(sql, parameters)
        return next(iter(rows[0].values()), None) if rows else None

    # -- idempotent batch inserts --------------------------------------------------------

    def table(self, name: str) -> Table:
        schema, _, table = name.rpartition(".")
        try:
            return Table(table, MetaData(), schema=schema or None, autoload_with=self.get_engine())
        except NoSuchTableError:
            raise ProviderError(
                f"table {name!r} does not exist in {self.masked_url}",
                hint="Create it first (SQLExecuteQueryOperator), with a unique key for the upsert.",
            ) from None

    def insert_rows(
        self,
        table: str,
        rows: Iterable[Any],
        *,
        key: str | Sequence[str],
        chunk_size: int = 1000,
        update_columns: Sequence[str] | None = None,
        columns: Sequence[str] | None = None,
        logger: logging.Logger | None = None,
    ) -> int:
        """Upsert ``rows`` (mappings of column to value) into ``table`` in batches of
        ``chunk_size``, each committed on its own; returns how many rows were written.

        A row whose ``key`` columns match a stored row updates it (``update_columns``,
        default every other column) instead of adding a duplicate: ``ON CONFLICT (key) DO
        UPDATE`` on PostgreSQL and SQLite, ``ON DUPLICATE KEY UPDATE`` on MySQL; so a
        retried batch writes nothing twice. ``key`` needs a unique index or primary key.
        ``rows`` may be any iterable, read lazily (a stream reader); an element that is
        itself a list (a page of rows) contributes each of its rows. ``columns`` keeps only
        those keys of each row (an API's items often carry more). A row the database
        refuses raises :class:`~tailrace.providers.errors.RowError` with its key and the
        database's message; its batch is rolled back, earlier batches stay committed.
        """
        logger = logger or log
        keys = [key] if isinstance(key, str) else list(key)
        target = self.table(table)
        engine = self.get_engine()
        written = 0
        flat = _flatten(rows)
        if columns is not None:
            flat = (_project(row, columns) for row in flat)
        for batch, chunk in enumerate(_chunks(flat, max(1, chunk_size)), start=1):
            columns = _columns(chunk, target, keys, table, batch, written)
            statement = upsert(engine.dialect.name, target, columns, keys, update_columns)
            try:
                with engine.begin() as conn:
                    conn.execute(statement, chunk)
            except (DBAPIError, StatementError) as exc:
                raise self._culprit(statement, chunk, keys, table, batch, written, exc) from None
            written += len(chunk)
            logger.info(
                "batch %d: %d rows upserted into %s (%d in all)", batch, len(chunk), table, written
            )
        return written

    def _culprit(
        self,
        statement: Insert,
        chunk: list[dict[str, Any]],
        keys: list[str],
        table: str,
        batch: int,
        before: int,
        exc: Exception,
    ) -> RowError:
        """Find the row that fails, row by row in one transaction that is rolled back."""
        with self.get_engine().connect() as conn:
            trans = conn.begin()
            try:
                for position, row in enumerate(chunk, start=1):
                    failure = _try(conn, statement, row)
                    if failure is not None:
                        return _row_error(table, keys, row, batch, before + position, failure)
            finally:
                trans.rollback()
        # Every row passes alone: report the batch's error against its first row.
        return _row_error(table, keys, chunk[0], batch, before + 1, exc)


def _try(conn: DbConnection, statement: Insert, row: dict[str, Any]) -> Exception | None:
    try:
        conn.execute(statement, [row])
    except (DBAPIError, StatementError) as exc:
        return exc
    return None


def _row_error(
    table: str, keys: list[str], row: Mapping[str, Any], batch: int, position: int, exc: Exception
) -> RowError:
    return RowError(
        table=table,
        key={k: row.get(k) for k in keys},
        batch=batch,
        position=position,
        message=_database_message(exc),
    )


def _flatten(rows: Iterable[Any]) -> Iterator[Any]:
    if isinstance(rows, Mapping):  # one row (an iterate item, say), not a list of them
        rows = [rows]
    for row in rows:
        if isinstance(row, list | tuple):
            yield from row
        else:
            yield row


def _project(row: Any, columns: Sequence[str]) -> Any:
    if not isinstance(row, Mapping):
        return row  # _columns names the problem
    return {c: row[c] for c in columns if c in row}


def _chunks(rows: Iterator[Any], size: int) -> Iterator[list[Any]]:
    while chunk := list(itertools.islice(rows, size)):
        yield chunk


def _columns(
    chunk: list[Any], target: Table, keys: list[str], table: str, batch: int, before: int
) -> list[str]:
    """The batch's columns; every row must be a mapping with the same columns."""
    first = chunk[0]
    for position, row in enumerate(chunk, start=1):
        problem = None
        if not isinstance(row, Mapping):
            problem = f"it is a {type(row).__name__}, not a mapping of column to value"
        elif missing := [k for k in keys if k not in row]:
            problem = f"it lacks the key column(s) {missing}"
        elif unknown := sorted(set(row) - set(target.columns.keys())):
            problem = f"the table has no column(s) {unknown}"
        elif row.keys() != first.keys():
            problem = f"its columns {sorted(row)} differ from the batch's {sorted(first)}"
        if problem is not None:
            key = {k: row.get(k) for k in keys} if isinstance(row, Mapping) else {}
            raise RowError(
                table=table, key=key, batch=batch, position=before + position, message=problem
            )
    return list(first.keys())


def upsert(
    dialect: str,
    table: Table,
    columns: Sequence[str],
    keys: Sequence[str],
    update_columns: Sequence[str] | None = None,
) -> Insert:
    """``INSERT ... ON CONFLICT (keys) DO UPDATE`` (PostgreSQL, SQLite) or ``... ON
    DUPLICATE KEY UPDATE`` (MySQL, MariaDB) of ``columns``."""
    updates = [c for c in (update_columns or columns) if c not in keys]
    if dialect in ("postgresql", "sqlite"):
        from sqlalchemy.dialects import postgresql, sqlite

        statement: postgresql.Insert | sqlite.Insert = (
            postgresql.insert(table) if dialect == "postgresql" else sqlite.insert(table)
        )
        if not updates:
            return statement.on_conflict_do_nothing(index_elements=list(keys))
        return statement.on_conflict_do_update(
            index_elements=list(keys), set_={c: statement.excluded[c] for c in updates}
        )
    if dialect in ("mysql", "mariadb"):
        from sqlalchemy.dialects.mysql import insert as mysql_insert

        my_statement = mysql_insert(table)
        # With nothing to update, "update" the key to itself: the row stays as it is.
        targets = updates or [keys[0]]
        return my_statement.on_duplicate_key_update({c: my_statement.inserted[c] for c in targets})
    raise ProviderError(
        f"upserts are not supported on {dialect!r}",
        hint="Use PostgreSQL, SQLite or MySQL/MariaDB.",
    )
