"""Human in the loop, as in Airflow 3.1: a task that asks a person and waits for the
answer in the triggerer, holding no worker (``tailrace.hitl.HITLTrigger``, by
classpath: the SDK does not import the core). The answer comes from the web UI
(Required actions), ``tailrace hitl respond`` or the REST API
(``PATCH /api/v1/hitlDetails/{dag_id}/{run_id}/{task_id}``), or the ``defaults`` when
``response_timeout`` passes first."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from tailrace.sdk import _clock as clock
from tailrace.sdk._baseoperator import BaseOperator
from tailrace.sdk._branch import SkipMixin, branch_skip_ids, short_circuit_skip_ids
from tailrace.sdk._context import Context
from tailrace.sdk._cross_dag import _CoreTrigger
from tailrace.sdk._params import ParamsDict
from tailrace.sdk._types import as_timedelta
from tailrace.sdk.errors import DagDefinitionError, FailTask

log = logging.getLogger("tailrace.task")

HITL_TRIGGER = "tailrace.hitl.HITLTrigger"


class HITLOperator(BaseOperator):
    """Ask a person: ``subject`` (and ``body``, Markdown) with ``options`` to choose from
    (several with ``multiple``), and ``params`` to fill in. The task waits in the
    triggerer until the response; its XCom is ``{"chosen_options", "params_input",
    "responded_at", "responded_by_user"}``. After ``response_timeout`` the ``defaults``
    are the response; without defaults the task fails.
    """

    template_fields = ("subject", "body")
    ui_color = "#10b981"

    def __init__(
        self,
        *,
        subject: str,
        options: list[str],
        body: str | None = None,
        defaults: str | list[str] | None = None,
        multiple: bool = False,
        params: ParamsDict | dict[str, Any] | None = None,
        response_timeout: timedelta | float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if self.execution_timeout and not response_timeout:
            # As Airflow: execution_timeout bounds the wait (its deprecated spelling).
            response_timeout, self.execution_timeout = self.execution_timeout, None
        self.response_timeout = as_timedelta(response_timeout)
        self.subject = subject
        self.body = body
        self.options = list(options or ())
        self.defaults = [defaults] if isinstance(defaults, str) else defaults
        self.multiple = multiple
        self.params = params if isinstance(params, ParamsDict) else ParamsDict(params or {})
        self._validate()

    def _problem(self, message: str, field: str) -> DagDefinitionError:
        return DagDefinitionError(
            message,
            dag_id=self.dag.dag_id if self.dag is not None else None,
            task_id=self.task_id,
            field=field,
        )

    def _validate(self) -> None:
        if not self.options:
            raise self._problem('"options" cannot be empty.', "options")
        if "_options" in self.params:
            raise self._problem('"_options" is not allowed in params', "params")
        if self.defaults is not None:
            if not set(self.defaults).issubset(self.options):
                raise self._problem(
                    f'defaults "{self.defaults}" should be a subset of options "{self.options}"',
                    "defaults",
                )
            if not self.multiple and len(self.defaults) > 1:
                raise self._problem(
                    'More than one defaults given when "multiple" is set to False.', "defaults"
                )

    @property
    def serialized_params(self) -> dict[str, dict[str, Any]]:
        return {name: param.dump() for name, param in self.params.items_params()}

    def execute(self, context: Context) -> Any:
        ti = context["ti"]
        deadline = clock.utcnow() + self.response_timeout if self.response_timeout else None
        log.info("Waiting for response")
        self.defer(
            trigger=_CoreTrigger(
                HITL_TRIGGER,
                {
                    "dag_id": ti.dag_id,
                    "run_id": ti.run_id,
                    "task_id": ti.task_id,
                    "map_index": ti.map_index,
                    "subject": self.subject,
                    "options": self.options,
                    "body": self.body,
                    "defaults": self.defaults,
                    "multiple": self.multiple,
                    "params": self.serialized_params,
                    "timeout_datetime": deadline.isoformat() if deadline else None,
                },
            ),
            method_name="execute_complete",
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        if "error" in event:
            raise FailTask(f"{event['error']} ({event['error_type']})")
        chosen = list(event["chosen_options"])
        if unknown := set(chosen) - set(self.options):
            raise ValueError(f"Responses {unknown} not in {self.options}")
        log.info("Response: %s by %s", chosen, event["responded_by_user"] or "the timeout")
        return {
            "chosen_options": chosen,
            "params_input": event["params_input"] or {},
            "responded_at": event["responded_at"],
            "responded_by_user": event["responded_by_user"],
        }


class ApprovalOperator(HITLOperator, SkipMixin):
    """Approve or Reject. Approve: the downstream tasks run. Reject: the direct downstream
    tasks are skipped (every downstream task with ``ignore_downstream_trigger_rules``),
    or, with ``fail_on_reject``, the task fails."""

    APPROVE = "Approve"
    REJECT = "Reject"

    def __init__(
        self,
        *,
        ignore_downstream_trigger_rules: bool = False,
        fail_on_reject: bool = False,
        **kwargs: Any,
    ) -> None:
        for fixed in ("options", "multiple"):
            if fixed in kwargs:
                raise DagDefinitionError(
                    f"Passing {fixed} to ApprovalOperator is not allowed.",
                    task_id=kwargs.get("task_id"),
                    field=fixed,
                )
        self.ignore_downstream_trigger_rules = ignore_downstream_trigger_rules
        self.fail_on_reject = fail_on_reject
        super().__init__(options=[self.APPROVE, self.REJECT], multiple=False, **kwargs)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        result = super().execute_complete(context, event)
        if result["chosen_options"][0] == self.APPROVE:
            log.info("Approved. Proceeding with downstream tasks...")
            return result
        if self.fail_on_reject:
            raise FailTask('Receive "Reject"')
        log.info("Skipping downstream tasks")
        self.skip(context, short_circuit_skip_ids(self, self.ignore_downstream_trigger_rules))
        return result


class HITLBranchOperator(HITLOperator, SkipMixin):
    """The chosen options (through ``options_mapping``, else as they are) are the task
    ids to follow; the other direct downstream tasks are skipped."""

    def __init__(self, *, options_mapping: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.options_mapping = dict(options_mapping or {})
        if invalid := sorted(set(self.options_mapping) - set(self.options)):
            raise self._problem(
                f"`options_mapping` contains keys that are not in `options`: {invalid}",
                "options_mapping",
            )
        if any(not isinstance(v, str) for v in self.options_mapping.values()):
            raise self._problem(
                "`options_mapping` values must be strings (task_ids).", "options_mapping"
            )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        result = super().execute_complete(context, event)
        branches: Iterable[str] = [self.options_mapping.get(o, o) for o in result["chosen_options"]]
        self.skip(context, branch_skip_ids(self, list(branches)))
        return result


class HITLEntryOperator(HITLOperator):
    """A form to fill in (``params``), confirmed with the one option "OK"."""

    OK = "OK"

    def __init__(self, **kwargs: Any) -> None:
        if "options" not in kwargs:
            kwargs["options"] = [self.OK]
            kwargs.setdefault("defaults", [self.OK])
        super().__init__(**kwargs)


__all__ = ["ApprovalOperator", "HITLBranchOperator", "HITLEntryOperator", "HITLOperator"]
