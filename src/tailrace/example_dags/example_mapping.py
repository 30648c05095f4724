"""Classic dynamic task mapping: one task instance per item, then a reduce step."""

from __future__ import annotations

from datetime import datetime

from tailrace import dag, task


@dag(schedule=None, start_date=datetime(2026, 1, 1), tags=["example"])
def example_mapping():
    @task
    def list_files() -> list[str]:
        return [f"data/part-{i:03d}.csv" for i in range(5)]

    @task
    def count_rows(path: str, multiplier: int) -> int:
        return (len(path) * multiplier) % 97

    @task
    def total(counts: list[int]) -> int:
        print(f"{len(counts)} files, {sum(counts)} rows")
        return sum(counts)

    total(count_rows.partial(multiplier=3).expand(path=list_files()))


example_mapping()
