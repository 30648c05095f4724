"""A DAG that shows what the web UI's pages show: task groups (nested), a branch, a mapped
task some of whose instances fail, and XComs. The browser tests and the documentation's
screenshots both run it."""

from __future__ import annotations

DAG_ID = "ui_demo"
# Instances of transform.check that fail: n % 5 == 3.
FAILING = (3,)
COUNT = 6
SOURCE = """
from datetime import datetime
from tailrace import DAG, TaskGroup, task

with DAG(
    "ui_demo",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    tags=["demo", "ui"],
    description="Task groups, a branch, a mapped task with a failure, XComs",
):

    @task
    def extract() -> list[int]:
        return list(range(6))

    @task.branch
    def route() -> str:
        return "transform.check"

    @task
    def check(n: int) -> int:
        if n % 5 == 3:
            raise ValueError(f"row {n} is not valid")
        return n * 10

    @task
    def lookup() -> dict:
        return {"EUR": 1.0, "USD": 1.08}

    @task
    def convert(rates: dict) -> float:
        return rates["USD"]

    @task
    def load(values, rate) -> str:
        return f"{len(values)} rows at {rate}"

    numbers = extract()
    with TaskGroup("transform"):
        checked = check.expand(n=numbers)
        with TaskGroup("enrich"):
            rate = convert(lookup())
    route() >> checked
    load(checked, rate)
"""
