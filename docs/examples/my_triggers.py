"""Triggers in a module beside the DAG files; their classpath is ``my_triggers.<Name>``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from tailrace import BaseTrigger, TriggerEvent


class ReadyTrigger(BaseTrigger):
    """Waits ``seconds``, then reports ``name`` as ready."""

    def __init__(self, name: str, seconds: float = 0.1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.name = name
        self.seconds = seconds

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("my_triggers.ReadyTrigger", {"name": self.name, "seconds": self.seconds})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        await asyncio.sleep(self.seconds)
        yield TriggerEvent({"ready": self.name})
