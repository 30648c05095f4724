"""EmptyOperator: a task that does nothing (for grouping and joins)."""

from __future__ import annotations

from typing import Any

from tailrace.sdk._baseoperator import BaseOperator
from tailrace.sdk._context import Context


class EmptyOperator(BaseOperator):
    """A task that does nothing; useful as a join point or placeholder."""

    ui_color = "#e8f7e4"

    def execute(self, context: Context) -> Any:
        return None
