"""FileSensor: waits for a file (or a glob match) to exist."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from tailrace.sdk.sensors._base import BaseSensorOperator, PokeReturnValue
from tailrace.sdk.triggers._file import FileTrigger, find_file

if TYPE_CHECKING:
    from tailrace.sdk._context import Context


class FileSensor(BaseSensorOperator):
    """Waits until a file matching the glob ``filepath`` (templated) exists; returns its path.

    ``recursive=True`` lets ``**`` match any number of directories; a matching directory
    counts once it contains a file. ``deferrable=True`` waits in the triggerer instead
    (as :class:`FileSensorAsync`), checking every ``poke_interval``.
    """

    template_fields: ClassVar[tuple[str, ...]] = ("filepath",)
    ui_color = "#91818a"

    def __init__(self, *, filepath: str, recursive: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.filepath = filepath
        self.recursive = recursive

    def poke(self, context: Context) -> PokeReturnValue:
        match = find_file(str(self.filepath), self.recursive)
        return PokeReturnValue(match is not None, match)

    def deferral_trigger(self, context: Context) -> FileTrigger:
        return FileTrigger(str(self.filepath), self.recursive, self.poke_interval)

    def deferral_timeout(self) -> timedelta:
        return timedelta(seconds=self.timeout)

    def execute_complete(self, context: Context, event: Any = None) -> str | None:
        """Resumes the deferred sensor with the trigger's event; returns the matched path."""
        if isinstance(event, dict) and isinstance(event.get("path"), str):
            path: str = event["path"]
            return path
        return None


class FileSensorAsync(FileSensor):
    """:class:`FileSensor` that always waits in the triggerer, freeing its worker slot."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs["deferrable"] = True
        super().__init__(**kwargs)
