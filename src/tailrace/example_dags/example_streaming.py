"""Streaming triggers: one trigger run pages through a (simulated) API, and the pages are
consumed downstream as they arrive.

`fetch_pages` is the producer. It defers once, on a trigger that fetches `pages` pages
(the run's param), and handles the pages in batches on a worker — one worker run per
batch of up to five, not one per page — appending each page to its output stream.
`summarise` is the consumer: `.iterate()` creates one instance per page as the page lands,
so page 0 is summarised while later pages are still being fetched. `report` adds the
summaries up once the stream has closed. Backpressure (`max_pending_events=10`): once ten
pages wait for `summarise`, no more go into the stream, and the pager pauses when ten more
wait in the triggerer, until `summarise` catches up.

`tailrace streams list` (or the web UI's stream view) shows `fetch_pages`' stream:
produced, acknowledged, pending, rate. Trigger with `{"pages": 200, "page_latency": 0.1}`
to watch it for 20 seconds.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from tailrace import BaseOperator, Param, dag, task
from tailrace.example_dags._paged_api import PagedApiTrigger


class FetchPages(BaseOperator):
    """Defers once; the pages arrive in batches and go into the task's output stream."""

    def execute(self, context):  # type: ignore[no-untyped-def]
        params = context["params"]
        trigger = PagedApiTrigger(pages=params["pages"], latency=params["page_latency"])
        self.defer(trigger=trigger, method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):  # type: ignore[no-untyped-def]
        self.log.info("handling pages %s", [e.payload["page"] for e in events])
        for event in events:
            yield event.payload  # {"page": n, "rows": [...]}: one stream item per page


@task(
    retries=2,
    retry_delay=timedelta(seconds=1),
    max_active_tis_per_dagrun=4,
    map_index_template="page {{ task.op_kwargs['page']['page'] }}",
)
def summarise(page: dict) -> dict:  # type: ignore[type-arg]
    return {"page": page["page"], "total": sum(row["value"] for row in page["rows"])}


@task
def report(summaries: list) -> dict:  # type: ignore[type-arg]
    # `summaries` is read lazily: one value per summarise instance, in page order.
    return {"pages": len(summaries), "total": sum(s["total"] for s in summaries)}


@dag(
    schedule=None,
    start_date=datetime(2026, 1, 1),
    tags=["example", "streaming"],
    params={
        "pages": Param(20, type="integer", minimum=1, description="Pages to fetch"),
        "page_latency": Param(0.05, type="number", minimum=0, description="Seconds per page"),
    },
)
def example_streaming():
    pages = FetchPages(
        task_id="fetch_pages",
        max_batch_size=5,
        max_batch_latency=0.2,
        max_pending_events=10,
        # A lost worker costs a retry that picks up after the last page it handled.
        retries=2,
        retry_delay=timedelta(seconds=1),
        stream_retry="resume",
    ).output
    report(summarise.iterate(page=pages))


example_streaming()
