"""Classic dynamic task mapping with expand() and partial()."""

from datetime import datetime

from tailrace import dag, task
from tailrace.sdk.operators.bash import BashOperator


@dag(schedule=None, start_date=datetime(2026, 1, 1), tags=["docs"])
def mapping():
    @task
    def list_files() -> list[str]:
        return ["a.csv", "b.csv", "c.csv"]

    @task
    def count_rows(path: str, header: bool) -> int:
        return len(path) - (1 if header else 0)

    @task
    def total(counts: list[int]) -> int:
        return sum(counts)  # one value per mapped instance, in map-index order

    files = list_files()
    counts = count_rows.partial(header=True).expand(path=files)
    total(counts)  # receives a list: one value per mapped instance, in map-index order

    # Several arguments: the cartesian product, 2 x 2 = 4 instances.
    @task
    def pair(region: str, day: int) -> str:
        return f"{region}-{day}"

    pair.expand(region=["eu", "us"], day=[1, 2])

    # Classic operators map the same way.
    BashOperator.partial(task_id="echo").expand(
        bash_command=["echo one", "echo two"],
    )

    # .map() transforms each item lazily, when the consumer runs.
    upper = files.map(lambda name: name.upper())

    @task
    def show(name: str) -> None:
        print(name)

    show.expand(name=upper)


mapping()
