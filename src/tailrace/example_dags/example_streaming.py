"""Streaming triggers: one trigger run yields every page of a (simulated) paged API.

`fetch_pages` starts in the triggerer and never touches a worker: each page's rows flow
straight into its output stream. `summarise` defers on the same kind of trigger and
handles pages in batches — a worker runs once per batch, not once per page.
`tailrace streams list` (or the web UI's stream view) shows both streams: produced,
acknowledged, pending, rate. Trigger with `{"pages": 200, "page_latency": 0.1}` to watch
`summarise`'s stream for 20 seconds.
"""

from __future__ import annotations

from datetime import datetime

from tailrace import BaseOperator, Param, dag
from tailrace.example_dags._paged_api import FetchPages, PagedApiTrigger


class SummarisePages(BaseOperator):
    """Defers once; handles the pages in batches as they arrive."""

    def execute(self, context):  # type: ignore[no-untyped-def]
        params = context["params"]
        trigger = PagedApiTrigger(pages=params["pages"], latency=params["page_latency"])
        self.defer(trigger=trigger, method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):  # type: ignore[no-untyped-def]
        self.log.info("handling pages %s", [e.payload["page"] for e in events])
        for event in events:
            yield {
                "page": event.payload["page"],
                "total": sum(r["value"] for r in event.payload["rows"]),
            }


@dag(
    schedule=None,
    start_date=datetime(2026, 1, 1),
    tags=["example", "streaming"],
    params={
        "pages": Param(20, type="integer", minimum=1, description="Pages summarise fetches"),
        "page_latency": Param(0.05, type="number", minimum=0, description="Seconds per page"),
    },
)
def example_streaming():
    FetchPages(task_id="fetch_pages", max_pending_events=10)
    SummarisePages(task_id="summarise", max_batch_size=5, max_batch_latency=0.2)


example_streaming()
