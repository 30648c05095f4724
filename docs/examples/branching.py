"""Branching and short-circuiting, with a join that tolerates skipped branches."""

from datetime import datetime

from tailrace import dag, task
from tailrace.sdk.operators.empty import EmptyOperator


@dag(schedule=None, start_date=datetime(2026, 1, 1), tags=["docs"])
def branching():
    @task.branch
    def choose(params=None) -> str:
        return "small" if params.get("size", 1) < 10 else "large"

    small = EmptyOperator(task_id="small")
    large = EmptyOperator(task_id="large")
    join = EmptyOperator(task_id="join", trigger_rule="none_failed_min_one_success")

    @task.short_circuit
    def is_weekday(logical_date=None) -> bool:
        return logical_date.weekday() < 5

    notify = EmptyOperator(task_id="notify")

    choose() >> [small, large] >> join >> is_weekday() >> notify


branching()
