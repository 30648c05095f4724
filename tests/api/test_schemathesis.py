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

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from tailrace.testing import DagHarness

from .conftest import Api

EXAMPLES_PER_OPERATION = 12


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
    # Live streams (Server-Sent Events) never end by themselves: tests/api/test_ui.py reads them.
    operations = [
        op
        for op in (result.ok() for result in schema.get_all_operations())
        if not op.path.endswith("/events")
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
