"""A simulated paged API as a streaming trigger, shared by the bundled examples.

(A file whose name starts with ``_`` is not scanned for DAGs; the examples import it.)
"""

from __future__ import annotations

import asyncio

from tailrace import BaseOperator, BaseTrigger, StartTriggerArgs, TriggerEvent


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
