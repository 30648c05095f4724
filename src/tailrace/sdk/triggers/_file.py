"""A trigger that waits for a file to appear."""

from __future__ import annotations

import asyncio
import glob
import os
from collections.abc import AsyncIterator
from typing import Any

from tailrace.sdk.triggers._base import BaseTrigger, TriggerEvent


def find_file(pattern: str, recursive: bool = False) -> str | None:
    """The first path (in sorted order) matching the glob ``pattern`` that is a file or a
    directory containing a file; ``None`` if there is none. ``**`` needs ``recursive``."""
    for path in sorted(glob.glob(pattern, recursive=recursive)):
        if os.path.isfile(path):
            return path
        for _, _, files in os.walk(path):
            if files:
                return path
    return None


class FileTrigger(BaseTrigger):
    """Fires when a file matching the glob ``filepath`` exists.

    Checks every ``poll_interval`` seconds (the glob runs in a thread, off the event
    loop); ``recursive=True`` lets ``**`` match any number of directories. A directory
    that matches counts once it contains a file. The event's payload is
    ``{"path": <first match>}``. ``poke_interval`` is accepted as Airflow's name for
    ``poll_interval``.
    """

    def __init__(
        self,
        filepath: str,
        recursive: bool = False,
        poll_interval: float = 5.0,
        *,
        poke_interval: float | None = None,
    ) -> None:
        super().__init__()
        self.filepath = str(filepath)
        self.recursive = recursive
        self.poll_interval = float(poke_interval if poke_interval is not None else poll_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return "tailrace.sdk.triggers.FileTrigger", {
            "filepath": self.filepath,
            "recursive": self.recursive,
            "poll_interval": self.poll_interval,
        }

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            match = await asyncio.to_thread(find_file, self.filepath, self.recursive)
            if match is not None:
                self.log.info("found %s (matching %s)", match, self.filepath)
                yield TriggerEvent({"path": match})
                return
            self.log.info(
                "no file matching %s yet; checking again in %ss", self.filepath, self.poll_interval
            )
            await asyncio.sleep(self.poll_interval)
