"""Extract, transform, load with TaskFlow: the shape of most pipelines."""

from __future__ import annotations

from datetime import datetime, timedelta

from tailrace import dag, task


@dag(
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["example"],
    default_args={"retries": 1, "retry_delay": timedelta(seconds=5)},
)
def example_etl():
    @task
    def extract() -> list[dict]:
        return [{"city": "Oslo", "temp_c": -3.5}, {"city": "Lagos", "temp_c": 31.0}]

    @task
    def transform(rows: list[dict]) -> list[dict]:
        return [{**row, "temp_f": round(row["temp_c"] * 9 / 5 + 32, 1)} for row in rows]

    @task
    def load(rows: list[dict]) -> int:
        for row in rows:
            print(f"{row['city']}: {row['temp_f']}°F")
        return len(rows)

    load(transform(extract()))


example_etl()
