"""Lazy mapping with .iterate(): instances created as a generator task yields pages."""

from datetime import datetime

from tailrace import dag, task


@dag(schedule=None, start_date=datetime(2026, 1, 1), tags=["docs"])
def iterate():
    @task
    def pages():
        # A generator: each page lands in the task's output stream as it is yielded, so
        # clean_page[0] can run while later pages are still being produced.
        for number in range(6):
            yield {"page": number, "rows": list(range(number * 3, number * 3 + 3))}

    @task(map_index_template="page {{ task.op_kwargs['page']['page'] }}")
    def clean_page(page: dict) -> list[int]:
        return [row * 10 for row in page["rows"]]

    @task(max_active_tis_per_dagrun=2)
    def store(batch: list) -> int:
        return sum(len(rows) for rows in batch)

    @task
    def report(stored) -> int:
        # A lazy view of every store instance's result (None for skipped ones).
        return sum(n for n in stored if n is not None)

    # Odd pages are filtered out: their clean_page instances finish skipped.
    cleaned = clean_page.iterate(page=pages().filter(lambda page: page["page"] % 2 == 0))
    report(store.iterate(batch=cleaned.batched(2)))

    # Several arguments are zipped (instance i gets item i of each), not crossed.
    @task
    def label(name: str, number: int) -> str:
        return f"{name}-{number}"

    label.iterate(name=["a", "b", "c"], number=[1, 2, 3])


iterate()
