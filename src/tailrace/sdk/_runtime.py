"""The contract between authored tasks and the runtime that executes them.

The worker implements :class:`RuntimeTaskInstance` (XCom access and skips go through it,
never through a database) and describes the run with :class:`DagRunInfo`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class RuntimeTaskInstance(Protocol):
    """The running task instance, as seen by task code (``context["ti"]``).

    ``map_index`` is -1 for an unmapped task.
    """

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    try_number: int
    max_tries: int

    def xcom_pull(
        self,
        task_ids: str | Iterable[str] | None = None,
        key: str = "return_value",
        map_indexes: int | Iterable[int] | None = None,
        default: Any = None,
        dag_id: str | None = None,
        run_id: str | None = None,
    ) -> Any:
        """Pull XComs. A single task id gives a single value (for a mapped upstream with
        ``map_indexes=None``, the list of all its mapped values in map index order); a
        list of task ids gives a list of values. Missing values are ``default``."""
        ...

    def xcom_push(self, key: str, value: Any) -> None:
        """Push an XCom of this task instance."""
        ...

    def skip_downstream_tasks(self, task_ids: Collection[str]) -> None:
        """Ask the runtime to mark these tasks of this run skipped when this task ends."""
        ...

    def mapped_length(self, task_id: str) -> int:
        """How many instances mapped task ``task_id`` has (an ``.iterate()`` source)."""
        ...


@dataclass(frozen=True)
class DagRunInfo:
    """The DAG run a task instance belongs to (``context["dag_run"]``)."""

    dag_id: str
    run_id: str
    logical_date: datetime | None = None
    data_interval_start: datetime | None = None
    data_interval_end: datetime | None = None
    run_type: str = "manual"
    conf: dict[str, Any] = field(default_factory=dict)
    start_date: datetime | None = None
