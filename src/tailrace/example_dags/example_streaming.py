"""Streaming triggers: one trigger run yields every page of a (simulated) paged API.

`fetch_pages` starts in the triggerer and never touches a worker: each page's rows flow
straight into its output stream. `summarise` defers on the same kind of trigger and
handles pages in batches — a worker runs once per batch, not once per page.
`tailrace streams list` shows both streams: produced, acknowledged, pending, rate.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

from tailrace import BaseOperator, BaseTrigger, StartTriggerArgs, TriggerEvent, dag


class PagedApiTrigger(BaseTrigger):
    """Pages through a simulated API; each page's checkpoint is the next page to fetch."""

    def __init__(self, pages: int = 20, page_size: int = 5, latency: float = 0.05) -> None:
        super().__init__()
        self.pages = pages
        self.page_size = page_size
        self.latency = latency

    def serialize(self) -> tuple[str, dict[str, object]]:
        return (
            f"{type(self).__module__}.PagedApiTrigger",
            {"pages": self.pages, "page_size": self.page_size, "latency": self.latency},
        )

    async def run(self):  # type: ignore[no-untyped-def]
        start = self.checkpoint["next_page"] if self.checkpoint else 0
        for page in range(start, self.pages):
            await asyncio.sleep(self.latency)  # the API's response time
            rows = [
                {"id": page * self.page_size + i, "value": (page * 7 + i) % 13}
                for i in range(self.page_size)
            ]
            self.log.info("fetched page %d", page)
            yield TriggerEvent({"page": page, "rows": rows}, checkpoint={"next_page": page + 1})


class FetchPages(BaseOperator):
    """Starts in the triggerer; the pages are its output stream. No worker at all."""

    start_from_trigger = True
    start_trigger_args = StartTriggerArgs(
        trigger_cls=f"{__name__}.PagedApiTrigger", trigger_kwargs={"pages": 20}
    )

    def execute(self, context):  # type: ignore[no-untyped-def]
        raise RuntimeError("never runs: this task lives in the triggerer")


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
