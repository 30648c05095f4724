"""SqlSensor: waits until a query's first cell is truthy."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from tailrace.providers.sql._hook import SqlHook
from tailrace.sdk.sensors import BaseSensorOperator
from tailrace.sdk.triggers import BaseTrigger, TriggerEvent

if TYPE_CHECKING:
    from tailrace.sdk._context import Context


def _first_cell(conn_id: str, sql: str, parameters: dict[str, Any] | None) -> Any:
    hook = SqlHook(conn_id)
    try:
        return hook.get_first(sql, parameters)
    finally:
        hook.dispose()


class SqlSensorTrigger(BaseTrigger):
    """Runs ``sql`` every ``poke_interval`` seconds (in a thread, off the event loop)
    until its first cell is truthy; fires with ``{"value": ..., "poke_count": n}``."""

    def __init__(
        self,
        conn_id: str,
        sql: str,
        parameters: dict[str, Any] | None = None,
        poke_interval: float = 5.0,
    ) -> None:
        super().__init__()
        self.conn_id = conn_id
        self.sql = sql
        self.parameters = dict(parameters or {})
        self.poke_interval = float(poke_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return "tailrace.providers.sql.SqlSensorTrigger", {
            "conn_id": self.conn_id,
            "sql": self.sql,
            "parameters": self.parameters,
            "poke_interval": self.poke_interval,
        }

    async def run(self) -> AsyncIterator[TriggerEvent]:
        poke = 0
        while True:
            poke += 1
            value = await asyncio.to_thread(_first_cell, self.conn_id, self.sql, self.parameters)
            if value:
                self.log.info("poke %d: query on %s returned %r; done", poke, self.conn_id, value)
                yield TriggerEvent({"value": value, "poke_count": poke})
                return
            self.log.info(
                "poke %d: query on %s returned %r, waiting %g s",
                poke,
                self.conn_id,
                value,
                self.poke_interval,
            )
            await asyncio.sleep(self.poke_interval)


class SqlSensor(BaseSensorOperator):
    """Pokes until the first cell of ``sql``'s first row is truthy (no row: not yet);
    returns that value. ``deferrable=True`` (or :class:`SqlSensorAsync`) polls from the
    triggerer, holding no worker slot. ``sql`` and ``parameters`` are templated."""

    template_fields: ClassVar[tuple[str, ...]] = ("sql", "parameters")

    def __init__(
        self,
        *,
        conn_id: str,
        sql: str,
        parameters: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.conn_id = conn_id
        self.sql = sql
        self.parameters = parameters
        self._pokes = 0
        self._value: Any = None

    def poke(self, context: Context) -> bool:
        self._pokes += 1
        value = _first_cell(self.conn_id, self.sql, self.parameters)
        if value:
            self._value = value
            return True
        self.log.info(
            "poke %d: query on %s returned %r, waiting %g s",
            self._pokes,
            self.conn_id,
            value,
            self.poke_interval,
        )
        return False

    def execute(self, context: Context, *args: Any, **kwargs: Any) -> Any:
        super().execute(context, *args, **kwargs)
        return self._value

    def deferral_trigger(self, context: Context) -> SqlSensorTrigger:
        return SqlSensorTrigger(self.conn_id, self.sql, self.parameters, self.poke_interval)

    def deferral_timeout(self) -> timedelta:
        return timedelta(seconds=self.timeout)

    def execute_complete(self, context: Context, event: Any = None) -> Any:
        """Resumes with the value that ended the wait."""
        return event.get("value") if isinstance(event, dict) else None


class SqlSensorAsync(SqlSensor):
    """:class:`SqlSensor` that always polls from the triggerer, freeing its worker slot."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs["deferrable"] = True
        super().__init__(**kwargs)
