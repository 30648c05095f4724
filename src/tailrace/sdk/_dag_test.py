"""``DAG.test()``: what it returns, and how it finds its runner.

The runner (``tailrace.testing.dag_test``) needs the runtime — a scheduler, a triggerer
and a database — which the SDK does not import. ``DAG.test()`` imports it by name when it
is called, so importing a DAG file still loads no database code (ADR 0028).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tailrace.sdk._dag import DAG

RUNNER_MODULE = "tailrace.testing.dag_test"


@dataclass(frozen=True)
class DagTestRun:
    """The run ``DAG.test()`` made: its state (``success`` or ``failed``), each task
    instance's state by ``task_id`` (``task_id[map_index]`` for a mapped one), and the
    ``return_value`` XCom of each unmapped task that pushed one."""

    dag_id: str
    run_id: str
    state: str
    task_states: dict[str, str | None] = field(default_factory=dict)
    return_values: dict[str, Any] = field(default_factory=dict)


def run_dag_test(dag: DAG, **options: Any) -> DagTestRun:
    runner = importlib.import_module(RUNNER_MODULE)
    result: DagTestRun = runner.run(dag, **options)
    return result
