"""Streaming triggers: one trigger run yields every page; a batch handler and a reader downstream."""

import asyncio
from datetime import datetime

from tailrace import BaseOperator, BaseTrigger, TriggerEvent, dag, task


async def get_page(url: str) -> dict:
    """Stands in for an async HTTP client: a page of rows and the next page's URL."""
    await asyncio.sleep(0.01)
    number = int(url.rsplit("=", 1)[1])
    rows = [{"id": number * 3 + i, "amount": 10 * number + i} for i in range(3)]
    return {"rows": rows, "next_url": f"/orders?page={number + 1}" if number < 4 else None}


class PagedApiTrigger(BaseTrigger):
    def __init__(self, url: str):
        super().__init__()
        self.url = url

    def serialize(self):
        # Defined in a DAG file: the triggerer imports the trigger from that file.
        return (f"{type(self).__module__}.PagedApiTrigger", {"url": self.url})

    async def run(self):
        # After a triggerer dies, another resumes the run from the last checkpoint.
        url = self.checkpoint["next"] if self.checkpoint else self.url
        while url:
            page = await get_page(url)
            url = page["next_url"]
            yield TriggerEvent({"rows": page["rows"]}, checkpoint={"next": url})


class Summarise(BaseOperator):
    def execute(self, context):
        self.defer(trigger=PagedApiTrigger("/orders?page=0"), method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):
        for event in events:                       # event.sequence_index, .payload, .is_last
            yield {"rows": len(event.payload["rows"])}


@task
def total(pages):          # pages = summarise.output, a stream
    return sum(p["rows"] for p in pages)


@dag(schedule=None, start_date=datetime(2026, 1, 1), tags=["docs"])
def streaming():
    summarise = Summarise(task_id="summarise", max_batch_size=2)
    total(summarise.output)


streaming()
