"""``.iterate()``: mapped tasks created as a paged API's pages arrive.

`fetch_pages` streams one event per page from the triggerer (no worker). Each page is
handled by its own `clean_page` instance as soon as it lands — page 0 is cleaned while
page 19 is still being fetched. Pages worth too little are filtered out (their
instances show as skipped), `store_batch` takes the cleaned pages in twos, and
`report` sees every instance once the stream has closed. Backpressure: at most 6 pages
wait for their instances before the pager pauses.
"""

from __future__ import annotations

from datetime import datetime

from tailrace import dag, task
from tailrace.example_dags._paged_api import FetchPages


@task(map_index_template="page {{ task.op_kwargs['page']['page'] }}")
def clean_page(page: dict) -> dict:  # type: ignore[type-arg]
    kept = [row for row in page["rows"] if row["value"] >= 3]
    return {"page": page["page"], "rows": kept, "total": sum(r["value"] for r in kept)}


@task(max_active_tis_per_dagrun=2)
def store_batch(pages: list) -> int:  # type: ignore[type-arg]
    # A real pipeline would upsert the rows here (see SQLInsertRowsOperator).
    return sum(len(page["rows"]) for page in pages)


@task
def report(stored: list) -> int:  # type: ignore[type-arg]
    # `stored` is read lazily: one value per store_batch instance, skipped ones absent.
    return sum(n for n in stored if n is not None)


@dag(schedule=None, start_date=datetime(2026, 1, 1), tags=["example", "streaming", "iterate"])
def example_iterate():
    pages = FetchPages(task_id="fetch_pages", max_pending_events=6).output
    # Pages worth less than 20 are left out: their clean_page instances are skipped.
    worth_it = pages.filter(lambda page: sum(r["value"] for r in page["rows"]) >= 20)
    cleaned = clean_page.iterate(page=worth_it)
    report(store_batch.iterate(pages=cleaned.batched(2)))


example_iterate()
