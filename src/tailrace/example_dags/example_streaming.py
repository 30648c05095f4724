"""Streaming triggers: one trigger run yields every page of a (simulated) paged API.

`fetch_pages` starts in the triggerer and never touches a worker: each page's rows flow
straight into its output stream. `summarise` defers on the same kind of trigger and
handles pages in batches — a worker runs once per batch, not once per page.
`tailrace streams list` shows both streams: produced, acknowledged, pending, rate.
"""

from __future__ import annotations

from datetime import datetime

from tailrace import BaseOperator, dag
from tailrace.example_dags._paged_api import FetchPages, PagedApiTrigger


class SummarisePages(BaseOperator):
    """Defers once; handles the pages in batches as they arrive."""

    def execute(self, context):  # type: ignore[no-untyped-def]
        self.defer(trigger=PagedApiTrigger(pages=20), method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):  # type: ignore[no-untyped-def]
        self.log.info("handling pages %s", [e.payload["page"] for e in events])
        for event in events:
            yield {
                "page": event.payload["page"],
                "total": sum(r["value"] for r in event.payload["rows"]),
            }


@dag(schedule=None, start_date=datetime(2026, 1, 1), tags=["example", "streaming"])
def example_streaming():
    FetchPages(task_id="fetch_pages", max_pending_events=10)
    SummarisePages(task_id="summarise", max_batch_size=5, max_batch_latency=0.2)


example_streaming()
