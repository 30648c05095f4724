"""Run one task in this process with XCom kept in memory: `tailrace tasks test` and tests."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import msgspec

from tailrace.clock import utcnow
from tailrace.execution._worker import RuntimeTI, _classify, execute_job, format_task_error
from tailrace.execution.protocol import (
    DagRunPayload,
    EventEnvelope,
    Outcome,
    RunTask,
    XComReply,
    XComRow,
)
from tailrace.sdk.errors import TaskDeferred
from tailrace.sdk.triggers import TriggerEvent
from tailrace.sdk.triggers._base import TASK_END_KEY
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


MAX_DEFERRALS = 100


def _first_event(deferred: TaskDeferred) -> Any:
    """The payload of the first event ``deferred``'s trigger yields (within its timeout)."""
    trigger = deferred.trigger

    async def first() -> Any:
        events = trigger.run()
        try:
            async for event in events:
                return event.payload if isinstance(event, TriggerEvent) else event
        finally:
            close = getattr(events, "aclose", None)
            if close is not None:
                await close()
            await trigger.cleanup()
        raise RuntimeError(f"{trigger!r} ended without an event")

    timeout = deferred.timeout.total_seconds() if deferred.timeout is not None else None
    try:
        return asyncio.run(asyncio.wait_for(first(), timeout))
    except TimeoutError:
        return {TASK_END_KEY: "failed", "error": f"the trigger did not fire within {timeout} s"}


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
    logger = log or logging.getLogger("tailrace.task")
    deferrals = 0
    while True:
        try:
            execute_job(job, ti, dag, logger)
        except KeyboardInterrupt:
            raise
        except TaskDeferred as deferred:
            # Followed here, as dag.test() does: the trigger runs in this process until
            # its first event, then the task resumes with it.
            deferrals += 1
            if deferrals > MAX_DEFERRALS:
                return InProcessResult(
                    outcome="failed", error=f"the task deferred {MAX_DEFERRALS} times"
                )
            logger.info("Deferred to %r; running the trigger here until it fires", deferred.trigger)
            payload = _first_event(deferred)
            if isinstance(payload, dict) and payload.get(TASK_END_KEY) is not None:
                if payload[TASK_END_KEY] == "failed":
                    return InProcessResult(outcome="failed", error=str(payload.get("error")))
                return InProcessResult(outcome="success", xcoms=dict(payload.get("xcoms") or {}))
            job = msgspec.structs.replace(
                job,
                next_method=deferred.method_name,
                next_kwargs=deferred.kwargs,
                events=[EventEnvelope("tasks-test", deferrals - 1, dumps(payload), True)],
            )
            continue
        except BaseException as exc:
            error = None if _classify(exc) == "skipped" else format_task_error(exc)
            return InProcessResult(outcome=_classify(exc), error=error)
        break
    return InProcessResult(
        outcome="success",
        xcoms={k: loads(v.value) for k, v in ti.pushed.items()},
        skipped=ti.skipped,
    )
