"""OpenTelemetry traces across processes: spans from the scheduler, the triggerer and
Celery (or local) workers reach an OTLP/HTTP receiver run here, and their parent/child
links follow a try from process to process."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from tailrace.db.models import DagRun, TaskInstance
from tailrace.demo_api import DemoApiConfig, running_demo_api
from tailrace.execution import log_path_for
from tailrace.testing import component_env, run_cli, start_component, stop_components, wait_for
from tailrace.testing.otlp import OtlpReceiver, ReceivedSpan, crossings, whole
from tailrace.tracing import run_trace_id, trace_id_hex

from .conftest import Cluster

TRACED = """
import asyncio
from datetime import datetime
from opentelemetry import trace
from tailrace import BaseOperator, BaseTrigger, TriggerEvent, dag, task

class Ticks(BaseTrigger):
    def __init__(self, n):
        super().__init__()
        self.n = n

    def serialize(self):
        return (f"{type(self).__module__}.Ticks", {"n": self.n})

    async def run(self):
        for i in range(self.n):
            await asyncio.sleep(0.05)
            yield TriggerEvent({"i": i})

class Collect(BaseOperator):
    def execute(self, context):
        self.log.info("deferring to the ticks")
        self.defer(trigger=Ticks(n=3), method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):
        for event in events:
            yield event.payload["i"]

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def traced():
    @task
    def hello():
        with trace.get_tracer("my.dag").start_as_current_span("my own work"):
            print("inside my own span")
        return 1

    hello()
    Collect(task_id="collect", max_batch_size=10)

traced()
"""


def _run(engine: Engine, dag_id: str) -> DagRun | None:
    with engine.connect() as conn:
        run = conn.execute(select(DagRun).where(DagRun.dag_id == dag_id)).first()
    return run if run is not None and run.state in ("success", "failed") else None


def _trace(engine: Engine, dag_id: str) -> str:
    run = wait_for(lambda: _run(engine, dag_id), timeout=120)
    assert run.state == "success"
    return trace_id_hex(run_trace_id(run.dag_id, run.run_id, run.id))


def _one(spans: list[ReceivedSpan], name: str, **attributes: object) -> ReceivedSpan:
    found = [
        s
        for s in spans
        if s.name == name and all(s.attributes.get(k) == v for k, v in attributes.items())
    ]
    assert len(found) == 1, (name, attributes, [(s.name, s.attributes) for s in spans])
    return found[0]


def _parent(spans: list[ReceivedSpan], span: ReceivedSpan) -> ReceivedSpan:
    by_id = {s.span_id: s for s in spans}
    assert span.parent_span_id in by_id, f"{span.name}'s parent was not exported"
    return by_id[span.parent_span_id]


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as receiver:
        yield receiver


@pytest.mark.parametrize("db_backend", ["postgres"])
@pytest.mark.parametrize("broker_url", ["redis"], indirect=True)
def test_a_runs_spans_link_scheduler_celery_worker_and_triggerer(
    cluster: Cluster, engine: Engine, dags_folder: Path, receiver: OtlpReceiver
) -> None:
    (dags_folder / "traced.py").write_text(textwrap.dedent(TRACED))
    cluster.env.update(receiver.env())
    cluster.start("api", "api-server")
    cluster.start("scheduler", "scheduler")
    cluster.start("triggerer", "triggerer")
    cluster.start("worker", "worker", "--concurrency", "1")
    assert run_cli(cluster.env, "dags", "trigger", "traced").returncode == 0
    trace_id = _trace(engine, "traced")

    def complete(spans: list[ReceivedSpan]) -> bool:
        # Each process exports on its own schedule: the tries' spans come from the
        # api-server (which applies the Celery workers' reports), the run's from the
        # scheduler. Wait for all of them: the scheduler ends each batch's "events" span
        # before the run's, so once the run's span is here so are the batches, and each
        # batch is handled by one more running span (after hello's and the deferring one).
        names = [s.name for s in spans if s.trace_id == trace_id]
        return (
            whole(spans, trace_id)
            and "dag_run traced" in names
            and names.count("running") >= 2 + names.count("events")
            and {"task hello", "task collect", "celery.send", "trigger Ticks"} <= set(names)
        )

    spans = [s for s in receiver.wait_for(complete) if s.trace_id == trace_id]
    root = _one(spans, "dag_run traced")
    assert root.parent_span_id is None and root.component == "scheduler"

    # hello: the try's span is the run's child; the Celery hop is a producer span in the
    # scheduler and a consumer span in a worker's pool process; the task's own span is
    # the running span's child, in that same process.
    mine = _one(spans, "my own work")
    running = _parent(spans, mine)
    assert running.name == "running" and running.component == "worker"
    consumed = _parent(spans, running)
    assert consumed.name == "celery.run" and consumed.component == "worker"
    sent = _parent(spans, consumed)
    assert sent.name == "celery.send" and sent.component == "scheduler"
    try_span = _parent(spans, sent)
    assert try_span.name == "task hello" and _parent(spans, try_span) == root
    assert mine.pid == running.pid == consumed.pid != sent.pid
    queued = _one(spans, "queued", **{"tailrace.task_id": "hello"})
    assert _parent(spans, queued) == try_span

    # collect: deferred from the worker, its trigger run is that running span's child in
    # the triggerer; the batches of events the scheduler hands back are the trigger
    # run's children, and the running spans that handle them theirs (through Celery).
    trigger = _one(spans, "trigger Ticks")
    deferring = _parent(spans, trigger)
    assert deferring.name == "running" and deferring.attributes["tailrace.task_id"] == "collect"
    assert trigger.component == "triggerer"
    assert len({trigger.pid, deferring.pid, sent.pid}) == 3, "three processes"
    batches = [s for s in spans if s.name == "events"]
    assert batches and all(_parent(spans, b) == trigger for b in batches)
    assert sum(b.attributes["tailrace.events"] for b in batches) == 3
    for batch in batches:
        handled = [
            s
            for s in spans
            if s.name == "running" and _parent(spans, _parent(spans, _parent(spans, s))) == batch
        ]
        assert len(handled) == 1, "each batch is handled by one running span, via Celery"
    assert _one(spans, "task collect").attributes["tailrace.state"] == "success"

    # The task's log lines carry the trace and the running span.
    with engine.connect() as conn:
        ti = conn.execute(select(TaskInstance).where(TaskInstance.task_id == "hello")).one()
    log = log_path_for(
        cluster.env["TAILRACE_HOME"] + "/logs", "traced", ti.run_id, "hello", -1, 1
    ).read_text()
    line = next(x for x in log.splitlines() if "inside my own span" in x)
    assert line.endswith(f"[trace_id={trace_id} span_id={mine.span_id}]")
    # So do the triggerer's lines in the deferred task's log: with the trigger run's span.
    collect_log = log_path_for(
        cluster.env["TAILRACE_HOME"] + "/logs", "traced", ti.run_id, "collect", -1, 1
    ).read_text()
    started = next(x for x in collect_log.splitlines() if "Trigger " in x and " started" in x)
    assert started.endswith(f"[trace_id={trace_id} span_id={trigger.span_id}]")


PAGES = 10
PAGINATION = """
from datetime import datetime
from tailrace import dag
from tailrace.example_dags._orders_pipeline import CURSOR, FetchPageByPage
from tailrace.providers.http import PaginatedHttpOperator

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def pages_deferred():
    FetchPageByPage(task_id="fetch", http_conn_id="demo_api", endpoint="/orders/cursor")

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def pages_streamed():
    PaginatedHttpOperator(
        task_id="fetch",
        http_conn_id="demo_api",
        endpoint="/orders/cursor",
        pagination=CURSOR,
        items_path="data.results",
    )

pages_deferred()
pages_streamed()
"""


@pytest.mark.parametrize("db_backend", ["postgres"])
def test_streaming_a_pagination_crosses_between_components_fewer_times_than_deferring(
    database_url: str, engine: Engine, dags_folder: Path, tmp_path: Path, receiver: OtlpReceiver
) -> None:
    """The streaming proposal's acceptance test: ten pages, per-page deferral against one
    streaming trigger run, hops counted from the exported spans."""
    (dags_folder / "pages.py").write_text(textwrap.dedent(PAGINATION))
    with running_demo_api(DemoApiConfig(pages=PAGES, page_size=3, latency=0.02)) as api:
        env = component_env(
            database_url,
            dags_folder,
            home=str(tmp_path / "home"),
            scheduler_poll_interval=1,
            worker_processes=2,
        )
        env.update(receiver.env(TAILRACE_CONN_DEMO_API=api))
        procs = []
        try:
            procs.append(start_component(env, "scheduler"))
            procs.append(start_component(env, "triggerer"))
            for dag_id in ("pages_deferred", "pages_streamed"):
                assert run_cli(env, "dags", "trigger", dag_id).returncode == 0
            deferred, streamed = _trace(engine, "pages_deferred"), _trace(engine, "pages_streamed")

            def complete(spans: list[ReceivedSpan]) -> bool:
                names = {
                    t: [s.name for s in spans if s.trace_id == t] for t in (deferred, streamed)
                }
                return all(
                    f"dag_run pages_{kind}" in names[t]
                    and names[t].count("HTTP GET") == PAGES
                    and whole(spans, t)
                    for kind, t in (("deferred", deferred), ("streamed", streamed))
                )

            spans = receiver.wait_for(complete)
        finally:
            stop_components(procs)
    per_page, streaming = crossings(spans, deferred), crossings(spans, streamed)
    # Per page: worker → triggerer (defer), triggerer → scheduler (the event), scheduler →
    # worker (resume). Streaming: one trigger run, its pages handed on in batches.
    assert per_page >= 3 * PAGES, per_page
    assert streaming < per_page, (streaming, per_page)
    print(f"crossings: per-page deferral {per_page}, streaming {streaming}")
    workers_streaming = {
        s.pid for s in spans if s.trace_id == streamed and s.scope == "tailrace.worker"
    }
    assert not workers_streaming, "the streamed pagination needs no worker at all"
