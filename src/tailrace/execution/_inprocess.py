"""Run one task in this process with XCom kept in memory: `tailrace tasks test` and tests."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tailrace.clock import utcnow
from tailrace.execution._worker import RuntimeTI, _classify, execute_job, format_task_error
from tailrace.execution.protocol import DagRunPayload, Outcome, RunTask, XComReply, XComRow
from tailrace.serialization import dumps, loads

if TYPE_CHECKING:
    from tailrace.sdk import DAG


class InMemoryTaskInstance(RuntimeTI):
    def __init__(
        self, job: RunTask, xcoms: Mapping[tuple[str, int, str], Any], mapped: set[str]
    ) -> None:
        super().__init__(job, max_xcom_bytes=1 << 30, mapped_task_ids=mapped)
        self._xcoms = {k: dumps(v) for k, v in xcoms.items()}

    def _fetch(self, task_ids: list[str], key: str, map_indexes: list[int] | None) -> XComReply:
        return XComReply(
            [
                XComRow(task_id, map_index, value)
                for (task_id, map_index, k), value in self._xcoms.items()
                if task_id in task_ids
                and k == key
                and (map_indexes is None or map_index in map_indexes)
            ]
        )


@dataclass
class InProcessResult:
    outcome: Outcome
    xcoms: dict[str, Any] = field(default_factory=dict)
    skipped: set[str] = field(default_factory=set)
    error: str | None = None


def run_task_in_process(
    dag: DAG,
    task_id: str,
    *,
    map_index: int = -1,
    conf: Mapping[str, Any] | None = None,
    logical_date: datetime | None = None,
    xcoms: Mapping[tuple[str, int, str], Any] | None = None,
    log: logging.Logger | None = None,
) -> InProcessResult:
    """Run ``task_id`` of ``dag`` here, ignoring dependencies and recording nothing.

    ``xcoms`` supplies upstream values as ``{(task_id, map_index, key): value}``.
    """
    from tailrace.sdk._mapped import MappedOperator

    when = logical_date or utcnow()
    job = RunTask(
        ti_id=0,
        dag_run_id=0,
        dag_id=dag.dag_id,
        task_id=task_id,
        map_index=map_index,
        try_number=1,
        max_tries=0,
        fileloc=dag.fileloc,
        dag_run=DagRunPayload(
            dag_id=dag.dag_id,
            run_id=f"test__{when.isoformat()}",
            run_type="manual",
            logical_date=when,
            data_interval_start=when,
            data_interval_end=when,
            start_date=when,
            conf=dict(conf or {}),
        ),
        log_path="",
    )
    mapped = {t.task_id for t in dag.tasks if isinstance(t, MappedOperator)}
    ti = InMemoryTaskInstance(job, xcoms or {}, mapped)
    try:
        execute_job(job, ti, dag, log or logging.getLogger("tailrace.task"))
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        error = None if _classify(exc) == "skipped" else format_task_error(exc)
        return InProcessResult(outcome=_classify(exc), error=error)
    return InProcessResult(
        outcome="success",
        xcoms={k: loads(v.value) for k, v in ti.pushed.items()},
        skipped=ti.skipped,
    )
