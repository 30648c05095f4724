"""``TriggerDagRunOperator`` and ``ExternalTaskSensor``: operators on other DAGs' runs.

Both defer at once to a trigger of ``tailrace.cross_dag`` (named by classpath: the SDK
does not import the core), which does its work in the triggerer, where the database is;
the task resumes on a worker only to judge the trigger's one event.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from tailrace.sdk._baseoperator import BaseOperator
from tailrace.sdk._callbacks import refuse_non_default
from tailrace.sdk._context import Context
from tailrace.sdk._types import as_timedelta
from tailrace.sdk.errors import FailTask, SkipTask, UnsupportedArgumentError
from tailrace.sdk.sensors._base import BaseSensorOperator
from tailrace.sdk.timezone import coerce_datetime
from tailrace.sdk.triggers import BaseTrigger, TriggerEvent

CROSS_DAG = "tailrace.cross_dag"


class _CoreTrigger(BaseTrigger):
    """A trigger of the core, by classpath and kwargs: serialized, never run here."""

    def __init__(self, classpath: str, kwargs: dict[str, Any]) -> None:
        super().__init__()
        self.classpath = classpath
        self.kwargs = kwargs

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return self.classpath, self.kwargs

    async def run(self) -> Any:  # pragma: no cover - the triggerer runs the real class
        raise RuntimeError(f"{self.classpath} runs in the triggerer")
        yield TriggerEvent(None)


def _refuse(task: BaseOperator, field: str, value: Any, hint: str) -> None:
    raise UnsupportedArgumentError(
        dag_id=task.dag.dag_id if task.dag is not None else None,
        task_id=task.task_id,
        field=field,
        value=value,
        hint=hint,
    )


def _iso(value: datetime | str | None) -> str | None:
    if value is None or isinstance(value, str):
        return value or None
    when = coerce_datetime(value)
    assert when is not None
    return when.isoformat()


class TriggerDagRunOperator(BaseOperator):
    """Triggers a run of ``trigger_dag_id`` (Airflow's operator of the same name).

    The run is made in the triggerer with ``conf``, ``trigger_run_id`` (default
    ``manual__<now>``, fixed when this task first runs) and ``logical_date``; its run id
    is pushed as the XCom ``trigger_run_id``. With ``wait_for_completion`` the task waits,
    in the triggerer and holding no worker, checking every ``poke_interval`` seconds, until
    the run reaches one of ``allowed_states`` (success) or ``failed_states`` (the task
    fails). ``deferrable`` is accepted either way: the wait is always in the triggerer.
    A run id that exists already is taken to be this task's own run.
    """

    template_fields: ClassVar[tuple[str, ...]] = (
        "trigger_dag_id",
        "trigger_run_id",
        "logical_date",
        "conf",
    )
    ui_color = "#ffefeb"

    def __init__(
        self,
        *,
        trigger_dag_id: str,
        trigger_run_id: str | None = None,
        conf: dict[str, Any] | None = None,
        logical_date: datetime | str | None = None,
        run_after: datetime | str | None = None,
        reset_dag_run: bool = False,
        wait_for_completion: bool = False,
        poke_interval: float = 60,
        allowed_states: Sequence[str] | None = None,
        failed_states: Sequence[str] | None = None,
        skip_when_already_exists: bool = False,
        fail_when_dag_is_paused: bool = False,
        note: str | None = None,
        deferrable: bool = False,
        openlineage_inject_parent_info: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        refuse_non_default(
            "TriggerDagRunOperator",
            {
                "reset_dag_run": reset_dag_run,
                "skip_when_already_exists": skip_when_already_exists,
                "fail_when_dag_is_paused": fail_when_dag_is_paused,
                "note": note,
                "run_after": run_after,
            },
            dag_id=self.dag.dag_id if self.dag is not None else None,
            task_id=self.task_id,
        )
        self.trigger_dag_id = trigger_dag_id
        self.trigger_run_id = trigger_run_id
        self.conf = dict(conf or {})
        self.logical_date = logical_date
        self.wait_for_completion = wait_for_completion
        self.poke_interval = float(poke_interval)
        self.allowed_states = list(allowed_states or ["success"])
        self.failed_states = list(failed_states or ["failed"])
        self.deferrable = deferrable
        # OpenLineage is not in Tailrace: the default (inject when it is there) is moot.
        self.openlineage_inject_parent_info = openlineage_inject_parent_info

    def execute(self, context: Context) -> None:
        logical_date = _iso(self.logical_date)
        run_id = self.trigger_run_id or f"manual__{logical_date or datetime.now(UTC).isoformat()}"
        self.defer(
            trigger=_CoreTrigger(
                f"{CROSS_DAG}.TriggerDagRunTrigger",
                {
                    "trigger_dag_id": self.trigger_dag_id,
                    "run_id": run_id,
                    "conf": self.conf,
                    "logical_date": logical_date,
                    "wait_for_completion": self.wait_for_completion,
                    "poke_interval": self.poke_interval,
                    "allowed_states": self.allowed_states,
                    "failed_states": self.failed_states,
                },
            ),
            method_name="execute_complete",
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> None:
        event = event or {}
        context["ti"].xcom_push("trigger_run_id", event.get("run_id"))
        if event.get("status") == "error":
            raise FailTask(f"could not trigger {self.trigger_dag_id!r}: {event.get('error')}")
        if event.get("status") == "failed":
            raise FailTask(
                f"{self.trigger_dag_id} run {event.get('run_id')} ended {event.get('state')}"
            )


class ExternalTaskSensor(BaseSensorOperator):
    """Waits for a task (``external_task_id``), tasks (``external_task_ids``) or the whole
    run of ``external_dag_id`` at this run's logical date (minus ``execution_delta``, or
    as ``execution_date_fn(logical_date, context)`` gives it) to reach
    ``allowed_states``; ``failed_states`` fail the sensor (skip it with ``soft_fail``),
    ``skipped_states`` skip it. The waiting is in the triggerer, every ``poll_interval``
    seconds, holding no worker, whether ``deferrable`` or not; ``timeout`` bounds it.
    """

    template_fields: ClassVar[tuple[str, ...]] = ("external_dag_id", "external_task_id")
    ui_color = "#4db7db"

    def __init__(
        self,
        *,
        external_dag_id: str,
        external_task_id: str | None = None,
        external_task_ids: Sequence[str] | None = None,
        external_task_group_id: str | None = None,
        allowed_states: Sequence[str] | None = None,
        skipped_states: Sequence[str] | None = None,
        failed_states: Sequence[str] | None = None,
        execution_delta: timedelta | None = None,
        execution_date_fn: Callable[..., datetime] | None = None,
        check_existence: bool = False,
        poll_interval: float = 2.0,
        deferrable: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        refuse_non_default(
            "ExternalTaskSensor",
            {"external_task_group_id": external_task_group_id},
            dag_id=self.dag.dag_id if self.dag is not None else None,
            task_id=self.task_id,
        )
        if external_task_id is not None and external_task_ids is not None:
            _refuse(
                self,
                "external_task_ids",
                external_task_ids,
                "Pass external_task_id or external_task_ids, not both (as in Airflow).",
            )
        self.external_dag_id = external_dag_id
        self.external_task_id = external_task_id
        self.external_task_ids = list(external_task_ids or [])
        self.allowed_states = list(allowed_states or ["success"])
        self.skipped_states = list(skipped_states or [])
        self.failed_states = list(failed_states or [])
        self.execution_delta = as_timedelta(execution_delta)
        self.execution_date_fn = execution_date_fn
        self.check_existence = check_existence
        self.poll_interval = float(poll_interval)
        self.deferrable = deferrable

    def _logical_date(self, context: Context) -> datetime:
        when = context["logical_date"] or context["dag_run"].start_date
        assert when is not None
        if self.execution_date_fn is not None:
            return self.execution_date_fn(when, context)
        if self.execution_delta is not None:
            return when - self.execution_delta
        return when

    def poke(self, context: Context) -> bool:
        raise NotImplementedError("ExternalTaskSensor waits in the triggerer, not by poking")

    def execute(self, context: Context, *args: Any, **kwargs: Any) -> Any:
        task_ids = self.external_task_ids or (
            [self.external_task_id] if self.external_task_id else None
        )
        self.defer(
            trigger=_CoreTrigger(
                f"{CROSS_DAG}.ExternalTaskTrigger",
                {
                    "external_dag_id": self.external_dag_id,
                    "logical_date": _iso(self._logical_date(context)),
                    "task_ids": task_ids,
                    "allowed_states": self.allowed_states,
                    "failed_states": self.failed_states,
                    "skipped_states": self.skipped_states,
                    "poll_interval": self.poll_interval,
                    "check_existence": self.check_existence,
                },
            ),
            method_name="execute_complete",
            timeout=self.timeout,
            timeout_outcome="skipped" if self.soft_fail else "failed_no_retry",
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> None:
        event = event or {}
        status = event.get("status")
        where = f"{self.external_dag_id} ({event.get('states') or event.get('error')})"
        if status == "skipped":
            raise SkipTask(f"{where} reached a skipped state")
        if status in ("failed", "error"):
            if self.soft_fail:
                raise SkipTask(f"{where} failed; skipping (soft_fail=True)")
            raise FailTask(f"{where} reached a failed state")
