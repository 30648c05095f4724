"""Human in the loop (Airflow 3.1): the trigger a ``HITLOperator`` defers to, which runs in
the triggerer (the task holds no worker while a person decides), and the response a
person gives through the REST API, the web UI or ``tailrace hitl respond``.

The trigger records the request (subject, options, defaults, params) for its task
instance, then looks for a response every ``poke_interval`` seconds until one is given or
``timeout_datetime`` passes: then the ``defaults`` are the response, or, without defaults,
the task fails on a timeout error. Its one event is the response.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tailrace.clock import utcnow
from tailrace.cross_dag import _db
from tailrace.errors import TailraceError
from tailrace.sdk._params import schema_problem
from tailrace.sdk.triggers import BaseTrigger, TriggerEvent
from tailrace.store import hitl as store

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine


class HITLResponseError(TailraceError):
    """A response the request does not accept: an unknown option, several without
    ``multiple``, params that do not match."""


class HITLRequestNotFoundError(HITLResponseError):
    """No such task instance, or it has asked nothing (not a HITL task, not waiting yet)."""


class HITLNotWaitingError(HITLResponseError):
    """The request was answered already, or its task instance no longer waits."""


def describe(dag_id: str, run_id: str, task_id: str, map_index: int) -> str:
    """How messages name a task instance: ``task 'approve' of DAG 'release', run 'r1'``."""
    index = f" [{map_index}]" if map_index >= 0 else ""
    return f"task {task_id!r}{index} of DAG {dag_id!r}, run {run_id!r}"


def find_request(
    conn: Connection, dag_id: str, run_id: str, task_id: str, map_index: int = -1
) -> dict[str, Any]:
    """The request (and any response) of a task instance, or HITLRequestNotFoundError."""
    where = describe(dag_id, run_id, task_id, map_index)
    ti_id = store.find_ti(conn, dag_id, run_id, task_id, map_index)
    if ti_id is None:
        raise HITLRequestNotFoundError(
            f"There is no {where}.",
            hint="Check the ids (and --map-index for a mapped task); the requests "
            "waiting are listed by `tailrace hitl list --pending`.",
        )
    found = store.detail(conn, ti_id)
    if found is None:
        raise HITLRequestNotFoundError(
            f"The {where} has asked nothing: it is not a human-in-the-loop task, or it "
            "has not started waiting yet",
        )
    return found


def check_response(
    request: Mapping[str, Any], chosen_options: Sequence[str], params_input: Mapping[str, Any]
) -> None:
    """Raise HITLResponseError naming what is wrong with the response."""
    if not chosen_options:
        raise HITLResponseError(
            "A response must choose at least one option", hint=f"Choose from {request['options']}."
        )
    if unknown := sorted(set(chosen_options) - set(request["options"])):
        raise HITLResponseError(
            f"Responses {unknown} are not among the options {request['options']}"
        )
    if len(chosen_options) > 1 and not request["multiple"]:
        raise HITLResponseError(
            f"Only one option may be chosen, not {list(chosen_options)} "
            "(the request is not multiple)"
        )
    params = request["params"] or {}
    if params_input and set(params_input) != set(params):
        raise HITLResponseError(
            f"params_input has {sorted(params_input)}; the request's params are {sorted(params)}"
        )
    for name, value in params_input.items():
        problem = schema_problem(params[name].get("schema") or {}, value)
        if problem is not None:
            raise HITLResponseError(f"params_input {name!r}: {problem}")


class HITLTrigger(BaseTrigger):
    """Waits for the response to a task instance's human-in-the-loop request."""

    def __init__(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        map_index: int,
        subject: str,
        options: Sequence[str],
        body: str | None = None,
        defaults: Sequence[str] | None = None,
        multiple: bool = False,
        params: Mapping[str, Any] | None = None,
        timeout_datetime: str | None = None,
        poke_interval: float = 1.0,
    ) -> None:
        super().__init__()
        self.dag_id, self.run_id, self.task_id, self.map_index = dag_id, run_id, task_id, map_index
        self.subject, self.body = subject, body
        self.options, self.defaults = list(options), None if defaults is None else list(defaults)
        self.multiple = multiple
        self.params = dict(params or {})
        self.timeout_datetime = timeout_datetime
        self.poke_interval = poke_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{__name__}.HITLTrigger",
            {
                "dag_id": self.dag_id,
                "run_id": self.run_id,
                "task_id": self.task_id,
                "map_index": self.map_index,
                "subject": self.subject,
                "options": self.options,
                "body": self.body,
                "defaults": self.defaults,
                "multiple": self.multiple,
                "params": self.params,
                "timeout_datetime": self.timeout_datetime,
                "poke_interval": self.poke_interval,
            },
        )

    def _ask(self) -> int:
        with _db().begin() as conn:
            ti_id = store.find_ti(conn, self.dag_id, self.run_id, self.task_id, self.map_index)
            if ti_id is None:
                raise TailraceError(
                    f"no task instance {self.dag_id}.{self.task_id} in {self.run_id}"
                )
            store.ask(
                conn,
                ti_id,
                subject=self.subject,
                body=self.body,
                options=self.options,
                defaults=self.defaults,
                multiple=self.multiple,
                params=self.params,
                now=utcnow(),
            )
        return ti_id

    def _response(self, ti_id: int) -> dict[str, Any] | None:
        with _db().connect() as conn:
            found = store.detail(conn, ti_id)
        return found if found is not None and found["response_received"] else None

    def _take_defaults(self, ti_id: int) -> None:
        assert self.defaults is not None
        values = {name: p.get("value") for name, p in self.params.items()}
        with _db().begin() as conn:
            store.answer(conn, ti_id, self.defaults, values, None, utcnow())

    async def run(self) -> AsyncIterator[TriggerEvent]:
        ti_id = await asyncio.to_thread(self._ask)
        deadline = datetime.fromisoformat(self.timeout_datetime) if self.timeout_datetime else None
        self.log.info("Waiting for a response to %r", self.subject)
        while True:
            response = await asyncio.to_thread(self._response, ti_id)
            if response is None and deadline is not None and utcnow() >= deadline:
                if self.defaults is None:
                    yield TriggerEvent(
                        {
                            "error": "The timeout has passed, and the response has not yet "
                            "been received.",
                            "error_type": "timeout",
                        }
                    )
                    return
                self.log.info(
                    "No response before the timeout: taking the defaults %s", self.defaults
                )
                await asyncio.to_thread(self._take_defaults, ti_id)
                response = await asyncio.to_thread(self._response, ti_id)
            if response is not None:
                yield TriggerEvent(
                    {
                        "chosen_options": response["chosen_options"],
                        "params_input": response["params_input"],
                        "responded_at": response["responded_at"],
                        "responded_by_user": response["responded_by"],
                        "timedout": response["responded_by"] is None,
                    }
                )
                return
            wait = self.poke_interval
            if deadline is not None:
                wait = max(0.0, min(wait, (deadline - utcnow()).total_seconds()))
            await asyncio.sleep(wait)


def respond(
    engine: Engine,
    dag_id: str,
    run_id: str,
    task_id: str,
    map_index: int,
    *,
    chosen_options: Sequence[str],
    params_input: Mapping[str, Any],
    responded_by: str,
) -> dict[str, Any]:
    """Record a person's response (the REST API's, the UI's and the CLI's); the trigger
    sees it at its next look. Returns the request with its response."""
    where = describe(dag_id, run_id, task_id, map_index)
    with engine.begin() as conn:
        request = find_request(conn, dag_id, run_id, task_id, map_index)
        if request["response_received"]:
            raise _answered(where, request)
        if request["task_instance_state"] != "deferred":
            raise HITLNotWaitingError(
                f"The {where} no longer waits for a response: it is "
                f"{request['task_instance_state'] or 'not scheduled'}"
            )
        try:
            check_response(request, chosen_options, params_input)
        except HITLResponseError as exc:
            raise HITLResponseError(f"{exc.reason} ({where})", hint=exc.hint) from None
        ti_id = request["ti_id"]
        answered = store.answer(conn, ti_id, chosen_options, params_input, responded_by, utcnow())
        found = store.detail(conn, ti_id)
        assert found is not None
        if not answered:  # another response came first
            raise _answered(where, found)
    return found


def _answered(where: str, request: Mapping[str, Any]) -> HITLNotWaitingError:
    by = request["responded_by"] or "the timeout (its defaults)"
    return HITLNotWaitingError(
        f"The {where} was already answered: {request['chosen_options']} by {by}.",
        hint="A request takes one response.",
    )
