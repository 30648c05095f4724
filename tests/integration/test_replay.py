"""Replay: a changed consumer runs again over an earlier run's retained stream, and the
source is not asked for anything."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from sqlalchemy import select

from tailrace.cleanup import clean
from tailrace.db.models import DagRun
from tailrace.errors import ReplayError
from tailrace.replay import replay_run
from tailrace.testing import DagHarness, component_env

WriteDag = Callable[[str, str], Path]

PAGES, PER_PAGE, BATCH = 100, 100, 1000


class Source:
    """A paged HTTP source that counts the requests it gets."""

    def __init__(self) -> None:
        self.requests = 0
        self.lock = threading.Lock()
        source = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with source.lock:
                    source.requests += 1
                page = int(self.path.rsplit("=", 1)[1])
                body = json.dumps(list(range(page * PER_PAGE, (page + 1) * PER_PAGE))).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/items?page="
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def source() -> Iterator[Source]:
    s = Source()
    yield s
    s.close()


def dag_source(url: str, consumer_body: str, consumer: str = "summarise") -> str:
    return f"""
import asyncio, json, urllib.request
from datetime import datetime
from tailrace import BaseOperator, BaseTrigger, TriggerEvent, dag, task


class Pages(BaseTrigger):
    def __init__(self, url, pages):
        super().__init__()
        self.url, self.pages = url, pages

    def serialize(self):
        return (f"{{__name__}}.Pages", {{"url": self.url, "pages": self.pages}})

    async def run(self):
        for page in range(self.pages):
            body = await asyncio.to_thread(
                lambda: urllib.request.urlopen(self.url + str(page)).read()
            )
            yield TriggerEvent(json.loads(body))


class Fetch(BaseOperator):
    def execute(self, context):
        self.defer(trigger=Pages({url!r}, {PAGES}), method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):
        return [item for event in events for item in event.payload]


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def replayed():
    @task
    def {consumer}(batch):
{consumer_body}

    {consumer}.iterate(batch=Fetch(task_id="fetch").output.batched({BATCH}))

replayed()
"""


V1 = "        return {'first': batch[0], 'last': batch[-1], 'total': sum(batch)}"
V2 = "        return {'first': batch[0], 'last': batch[-1], 'total': 3 * sum(batch), 'v': 2}"


def test_a_changed_consumer_replays_a_10000_item_stream_without_asking_the_source(
    harness: DagHarness, write_dag: WriteDag, source: Source
) -> None:
    write_dag("replayed.py", dag_source(source.url, V1))
    harness.parse()
    first = harness.trigger("replayed")
    assert harness.run(first, timeout=110)["state"] == "success"
    assert source.requests == PAGES
    with harness.engine.connect() as conn:
        source_run = conn.scalar(select(DagRun.run_id).where(DagRun.id == first))
    assert source_run is not None

    write_dag("replayed.py", dag_source(source.url, V2))
    harness.parse()
    asked = source.requests
    dispatched = len(harness.dispatched)
    pk, run_id = replay_run(harness.engine, "replayed", source_run, "summarise")
    summary = harness.run(pk, timeout=110)
    assert summary["state"] == "success"
    assert source.requests == asked, "the replay asked the source for nothing"
    with harness.engine.connect() as conn:
        replay = conn.execute(select(DagRun).where(DagRun.id == pk)).one()
    assert replay.replay_of == source_run and run_id.startswith("replay__")
    fetch = harness.task_instance(pk, "fetch")
    assert (fetch.state, fetch.try_number) == ("success", 0), "the producer did not run"
    assert fetch.id not in harness.dispatched[dispatched:]
    assert harness.stream_items(pk, "fetch") == list(range(PAGES * PER_PAGE))
    batches = PAGES * PER_PAGE // BATCH
    results = _mapped_xcoms(harness, pk, batches)
    # The new code ran, over the same items in the same order, expanded as live.
    assert results == [
        {
            "first": i * BATCH,
            "last": (i + 1) * BATCH - 1,
            "total": 3 * sum(range(i * BATCH, (i + 1) * BATCH)),
            "v": 2,
        }
        for i in range(batches)
    ]


def _mapped_xcoms(harness: DagHarness, pk: int, count: int) -> list[object]:
    from tailrace.db.models import XCom
    from tailrace.serialization import loads

    with harness.engine.connect() as conn:
        rows = conn.execute(
            select(XCom.map_index, XCom.value)
            .where(XCom.dag_run_id == pk, XCom.task_id == "summarise", XCom.key == "return_value")
            .order_by(XCom.map_index)
        ).all()
    assert [r.map_index for r in rows] == list(range(count))
    return [loads(r.value) for r in rows]


def test_replay_names_a_missing_consumer_and_says_when_a_stream_was_removed(
    harness: DagHarness,
    write_dag: WriteDag,
    source: Source,
    database_url: str,
    dags_folder: Path,
) -> None:
    write_dag("replayed.py", dag_source(source.url, V1))
    harness.parse()
    first = harness.trigger("replayed")
    assert harness.run(first, timeout=110)["state"] == "success"
    with harness.engine.connect() as conn:
        source_run = conn.scalar(select(DagRun.run_id).where(DagRun.id == first))
    assert source_run is not None

    write_dag("replayed.py", dag_source(source.url, V1, consumer="renamed"))
    harness.parse()
    with pytest.raises(ReplayError, match="has no task 'summarise' any more"):
        replay_run(harness.engine, "replayed", source_run, "summarise")

    now = datetime.now(UTC)
    clean(harness.engine, now, now=now, tables=["stream_item"])
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tailrace",
            "streams",
            "replay",
            "replayed",
            source_run,
            "--task",
            "renamed",
        ],
        env=component_env(database_url, dags_folder),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    said = " ".join(done.stderr.split())
    assert done.returncode == 1
    assert "the stream of task 'fetch'" in said and "was removed on 20" in said, said
    assert "retention" in said
