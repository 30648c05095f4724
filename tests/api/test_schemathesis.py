"""schemathesis generates requests from the served OpenAPI document: none may get a 5xx.

Operations are walked inside one test per database (schemathesis' pytest loader does not
support this pytest). Each gets a few Hypothesis examples: valid requests with made-up
path values, valid requests naming rows that exist (so handlers run past their 404s), and
requests that break the schema.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from tailrace.testing import DagHarness

from .conftest import Api

EXAMPLES_PER_OPERATION = 12


@pytest.mark.timeout(300)  # every operation of the API, a dozen examples each
def test_no_generated_request_gets_a_server_error(api: Api, harness: DagHarness) -> None:
    run_id = api.admin.post("/dags/api_basic/runs", json={}).json()["run_id"]
    ti = api.admin.get(f"/dags/api_basic/runs/{run_id}/task-instances").json()["items"][0]
    api.admin.post("/connections", json={"conn_id": "warehouse", "uri": "http://u:p@h/"})
    existing = {
        "dag_id": "api_basic",
        "run_id": run_id,
        "task_id": ti["task_id"],
        "task_instance_id": ti["id"],
        "conn_id": "warehouse",
        "try_number": 1,
    }
    schema = schemathesis.openapi.from_url(f"{api.url}/openapi.json")
    headers = {"Authorization": api.admin.headers["Authorization"]}
    # Live streams (Server-Sent Events) never end by themselves: tests/api/test_ui.py reads
    # them. /assets/events is a plain list (and a POST), Airflow's name for asset events.
    operations = [
        op
        for op in (result.ok() for result in schema.get_all_operations())
        if not op.path.endswith("/events") or op.path == "/assets/events"
    ]
    assert len(operations) > 20
    statuses: Counter[int] = Counter()
    for operation in operations:
        names = set(re.findall(r"{(\w+)}", operation.path))
        known = {k: v for k, v in existing.items() if k in names}
        strategies = [
            operation.as_strategy(),
            operation.as_strategy(path_parameters=known),
            operation.as_strategy(GenerationMode.NEGATIVE),
        ]

        @given(data=st.data())
        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def check(data: st.DataObject) -> None:
            case = data.draw(st.one_of(strategies))  # noqa: B023 - this iteration's
            response: Any = case.call_and_validate(headers=headers, checks=[not_a_server_error])
            statuses[response.status_code] += 1

        check()
    # The walk reached handlers, not only validation and 404s.
    assert statuses[200] and statuses[404] and statuses[422], statuses


# Sequences of calls chained by the links schemathesis infers from the schema (a created
# run's id into its task instances, a connection's id into its GET and DELETE ...).
STATEFUL_SEQUENCES = 12
STATEFUL_STEPS = 8


def test_no_stateful_sequence_of_calls_gets_a_server_error(api: Api, harness: DagHarness) -> None:
    api.admin.post("/dags/api_basic/runs", json={})
    schema = schemathesis.openapi.from_url(f"{api.url}/openapi.json").exclude(
        path_regex=r"/events$"
    )
    headers = {"Authorization": api.admin.headers["Authorization"]}
    statuses: Counter[int] = Counter()
    base = schema.as_state_machine()

    class Workflow(base):  # type: ignore[valid-type, misc]
        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"headers": headers}

        def validate_response(self, response: Any, case: Any, *args: Any, **kwargs: Any) -> None:
            statuses[response.status_code] += 1
            case.validate_response(response, checks=[not_a_server_error], transport_kwargs=kwargs)

    # One sequence per run: the server's state carries over from one sequence to the next,
    # so Hypothesis must not replay a prefix of an earlier one (its draws would differ, and
    # Hypothesis would call the strategy flaky); a failure is reported as found.
    for _ in range(STATEFUL_SEQUENCES):
        Workflow.run(
            settings=settings(
                max_examples=1,
                stateful_step_count=STATEFUL_STEPS,
                deadline=None,
                database=None,
                phases=[Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
        )
    assert not any(status >= 500 for status in statuses), statuses
    # Links carried real ids from one call into the next: some calls got past their 404s.
    assert statuses[200] + statuses[201] > 0, statuses
