"""SQLExecuteQueryOperator and SQLInsertRowsOperator."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from tailrace.providers.sql._hook import SqlHook
from tailrace.sdk._baseoperator import BaseOperator

if TYPE_CHECKING:
    from tailrace.sdk._context import Context


class SQLExecuteQueryOperator(BaseOperator):
    """Runs ``sql`` (one statement or a list, in one transaction) on the connection
    ``conn_id``, with bind ``parameters`` (``:name`` placeholders).

    Returns the last statement's rows (``return_last=False``: every statement's), each row
    a dict of column to value (``None`` for a statement without rows). ``sql`` and
    ``parameters`` are templated.
    """

    template_fields: ClassVar[tuple[str, ...]] = ("sql", "parameters")
    template_ext: ClassVar[tuple[str, ...]] = (".sql",)
    ui_color = "#cdaaed"

    def __init__(
        self,
        *,
        sql: str | list[str],
        conn_id: str,
        parameters: dict[str, Any] | None = None,
        return_last: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.sql = sql
        self.conn_id = conn_id
        self.parameters = parameters
        self.return_last = return_last

    def execute(self, context: Context) -> Any:
        hook = SqlHook(self.conn_id)
        try:
            statements = [self.sql] if isinstance(self.sql, str) else list(self.sql)
            self.log.info("Running %d statement(s) on %s", len(statements), hook.masked_url)
            results = hook.run(statements, self.parameters)
        finally:
            hook.dispose()
        return results[-1] if self.return_last else results


class SQLInsertRowsOperator(BaseOperator):
    """Upserts ``rows`` into ``table`` on the key column(s) ``key``, in batches of
    ``chunk_size`` committed one by one: a retry rewrites rows, never duplicates them.

    ``rows`` is any iterable of dicts (templated, so an upstream task's output works,
    including a whole output stream read lazily); an element that is a list — a page of
    a :class:`~tailrace.providers.http.PaginatedHttpOperator` — contributes each of its
    rows; ``columns`` keeps only those keys of each row. Returns the number of rows
    written. A row the database refuses fails the task with its key and the database's
    message; earlier batches stay committed.
    """

    template_fields: ClassVar[tuple[str, ...]] = ("rows",)
    ui_color = "#cdaaed"

    def __init__(
        self,
        *,
        table: str,
        rows: Any,
        key: str | Sequence[str],
        conn_id: str,
        chunk_size: int = 1000,
        update_columns: Sequence[str] | None = None,
        columns: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.rows = rows
        self.key = key
        self.conn_id = conn_id
        self.chunk_size = chunk_size
        self.update_columns = update_columns
        self.columns = columns

    def execute(self, context: Context) -> int:
        hook = SqlHook(self.conn_id)
        try:
            written = hook.insert_rows(
                self.table,
                self.rows,
                key=self.key,
                chunk_size=self.chunk_size,
                update_columns=self.update_columns,
                columns=self.columns,
                logger=self.log,
            )
        finally:
            hook.dispose()
        self.log.info("%d rows upserted into %s", written, self.table)
        return written
