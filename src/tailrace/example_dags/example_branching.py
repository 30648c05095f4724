"""Branching, short circuits, trigger rules, task groups, params and templates."""

from __future__ import annotations

from datetime import datetime

from tailrace import DAG, Param, TaskGroup, task
from tailrace.sdk.operators.bash import BashOperator
from tailrace.sdk.operators.empty import EmptyOperator

with DAG(
    "example_branching",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    params={"mode": Param("fast", enum=["fast", "thorough"], description="How hard to check")},
    tags=["example"],
) as example_branching:

    @task.branch
    def choose(**context) -> str:
        return "fast_path" if context["params"]["mode"] == "fast" else "checks.thorough_path"

    fast = EmptyOperator(task_id="fast_path")

    with TaskGroup("checks") as checks:
        thorough = BashOperator(
            task_id="thorough_path",
            bash_command="echo 'checking {{ params.mode }} run {{ run_id }}'",
        )

    # After a branch one side is skipped, so the join must not require all_success.
    @task.short_circuit(trigger_rule="none_failed_min_one_success")
    def worth_reporting() -> bool:
        return True

    report = BashOperator(
        task_id="report",
        bash_command="echo 'report for {{ ds }}'",
    )

    choose() >> [fast, checks] >> worth_reporting() >> report
