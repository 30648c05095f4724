"""Triggers that act on other DAGs' runs, for ``TriggerDagRunOperator`` and
``ExternalTaskSensor``: they run in the triggerer, which has the metadata database, so
the waiting holds no worker. The triggerer installs its engine with :func:`use_engine`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, func, select

from tailrace.dagrun import trigger_dag_run
from tailrace.db.models import Dag, DagRun, TaskInstance
from tailrace.errors import DagNotFoundError, RunExistsError
from tailrace.sdk.errors import TailraceError
from tailrace.sdk.timezone import coerce_datetime
from tailrace.sdk.triggers import BaseTrigger, TriggerEvent

_engine: Engine | None = None


@contextlib.contextmanager
def use_engine(engine: Engine) -> Iterator[None]:
    """The triggers here read and write ``engine``'s database within the block."""
    global _engine
    previous, _engine = _engine, engine
    try:
        yield
    finally:
        _engine = previous


def _db() -> Engine:
    if _engine is None:
        raise TailraceError("this trigger reads the metadata database and runs only in a triggerer")
    return _engine


def _when(value: str | None) -> datetime | None:
    return coerce_datetime(datetime.fromisoformat(value)) if value else None


class TriggerDagRunTrigger(BaseTrigger):
    """Creates a manual run of ``trigger_dag_id`` and, with ``wait_for_completion``,
    waits (every ``poke_interval`` seconds) until it ends. Its one event is
    ``{"status": "success" | "failed" | "skipped" | "error", "run_id", "state", "error"}``."""

    def __init__(
        self,
        trigger_dag_id: str,
        run_id: str,
        conf: dict[str, Any] | None = None,
        logical_date: str | None = None,
        wait_for_completion: bool = False,
        poke_interval: float = 60.0,
        allowed_states: Sequence[str] = ("success",),
        failed_states: Sequence[str] = ("failed",),
        skip_when_already_exists: bool = False,
    ) -> None:
        super().__init__()
        self.trigger_dag_id = trigger_dag_id
        self.run_id = run_id
        self.conf = dict(conf or {})
        self.logical_date = logical_date
        self.wait_for_completion = wait_for_completion
        self.poke_interval = poke_interval
        self.allowed_states = list(allowed_states)
        self.failed_states = list(failed_states)
        self.skip_when_already_exists = skip_when_already_exists

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{__name__}.TriggerDagRunTrigger",
            {
                "trigger_dag_id": self.trigger_dag_id,
                "run_id": self.run_id,
                "conf": self.conf,
                "logical_date": self.logical_date,
                "wait_for_completion": self.wait_for_completion,
                "poke_interval": self.poke_interval,
                "allowed_states": self.allowed_states,
                "failed_states": self.failed_states,
                "skip_when_already_exists": self.skip_when_already_exists,
            },
        )

    def _event(self, status: str, state: str | None = None, error: str | None = None) -> Any:
        return TriggerEvent(
            {"status": status, "run_id": self.run_id, "state": state, "error": error}
        )

    def _create(self) -> str | None:
        """None once the run exists; else why it cannot be made."""
        engine = _db()
        with engine.connect() as conn:
            exists = conn.scalar(
                select(func.count())
                .select_from(DagRun)
                .where(DagRun.dag_id == self.trigger_dag_id, DagRun.run_id == self.run_id)
            )
        if exists:
            # Made by this trigger before a failover, or by someone else: the run id is
            # this task's own (it was fixed when the task deferred), so it is ours.
            return None
        try:
            trigger_dag_run(
                engine,
                self.trigger_dag_id,
                self.conf,
                run_id=self.run_id,
                logical_date=_when(self.logical_date),
            )
        except DagNotFoundError as exc:
            return str(exc)
        except RunExistsError:
            return None
        return None

    def _state(self) -> str | None:
        with _db().connect() as conn:
            state = conn.scalar(
                select(DagRun.state).where(
                    DagRun.dag_id == self.trigger_dag_id, DagRun.run_id == self.run_id
                )
            )
        return None if state is None else str(state)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        error = await asyncio.to_thread(self._create)
        if error is not None:
            yield self._event("error", error=error)
            return
        self.log.info("Triggered %s run %s", self.trigger_dag_id, self.run_id)
        if not self.wait_for_completion:
            yield self._event("success")
            return
        while True:
            state = await asyncio.to_thread(self._state)
            if state in self.allowed_states:
                yield self._event("success", state)
                return
            if state in self.failed_states:
                yield self._event("failed", state)
                return
            self.log.info("%s run %s is %s; waiting", self.trigger_dag_id, self.run_id, state)
            await asyncio.sleep(self.poke_interval)


class ExternalTaskTrigger(BaseTrigger):
    """Waits until ``external_dag_id``'s run at ``logical_date`` (its tasks
    ``task_ids``, or the run itself when there are none) reaches one of
    ``allowed_states``, or one of ``failed_states`` / ``skipped_states``. Its one event
    is ``{"status": "success" | "failed" | "skipped" | "error", "states": {...}}``."""

    def __init__(
        self,
        external_dag_id: str,
        logical_date: str,
        task_ids: Sequence[str] | None = None,
        allowed_states: Sequence[str] = ("success",),
        failed_states: Sequence[str] = (),
        skipped_states: Sequence[str] = (),
        poll_interval: float = 2.0,
        check_existence: bool = False,
    ) -> None:
        super().__init__()
        self.external_dag_id = external_dag_id
        self.logical_date = logical_date
        self.task_ids = list(task_ids) if task_ids else None
        self.allowed_states = list(allowed_states)
        self.failed_states = list(failed_states)
        self.skipped_states = list(skipped_states)
        self.poll_interval = poll_interval
        self.check_existence = check_existence

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{__name__}.ExternalTaskTrigger",
            {
                "external_dag_id": self.external_dag_id,
                "logical_date": self.logical_date,
                "task_ids": self.task_ids,
                "allowed_states": self.allowed_states,
                "failed_states": self.failed_states,
                "skipped_states": self.skipped_states,
                "poll_interval": self.poll_interval,
                "check_existence": self.check_existence,
            },
        )

    def _states(self) -> tuple[bool, list[str | None]]:
        """Whether the DAG exists, and the states to judge (empty: no such run yet)."""
        when = _when(self.logical_date)
        with _db().connect() as conn:
            known = conn.scalar(select(Dag.dag_id).where(Dag.dag_id == self.external_dag_id))
            runs = select(DagRun.id, DagRun.state).where(
                DagRun.dag_id == self.external_dag_id, DagRun.logical_date == when
            )
            rows = conn.execute(runs).all()
            if not rows or self.task_ids is None:
                return known is not None, [r.state for r in rows]
            states = conn.scalars(
                select(TaskInstance.state).where(
                    TaskInstance.dag_run_id.in_([r.id for r in rows]),
                    TaskInstance.task_id.in_(self.task_ids),
                )
            ).all()
        return True, list(states)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            known, states = await asyncio.to_thread(self._states)
            if not known and self.check_existence:
                yield TriggerEvent(
                    {"status": "error", "error": f"DAG {self.external_dag_id!r} does not exist"}
                )
                return
            summary = {str(s): states.count(s) for s in set(states)}
            if states and any(s in self.failed_states for s in states):
                yield TriggerEvent({"status": "failed", "states": summary})
                return
            if states and any(s in self.skipped_states for s in states):
                yield TriggerEvent({"status": "skipped", "states": summary})
                return
            if states and all(s in self.allowed_states for s in states):
                yield TriggerEvent({"status": "success", "states": summary})
                return
            self.log.info(
                "%s at %s: %s; waiting",
                self.external_dag_id,
                self.logical_date,
                summary or "no run yet",
            )
            await asyncio.sleep(self.poll_interval)
