"""The smallest useful DAG: three TaskFlow tasks passing values downstream."""

from datetime import datetime

from tailrace import dag, task


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def my_dag():
    @task
    def extract() -> list[int]:
        return [1, 2, 3]

    @task
    def transform(values: list[int]) -> list[int]:
        return [v * 10 for v in values]

    @task
    def load(values: list[int]) -> None:
        print(f"loaded {sum(values)}")

    load(transform(extract()))


my_dag()  # calling the function builds the DAG; without the call there is no DAG
