"""An OTLP/HTTP trace receiver in a thread: what tests (and benchmarks) export spans to.

It decodes each ``POST /v1/traces`` with ``opentelemetry-proto`` and keeps the spans as
plain values, with the instrumentation scope and the resource they came from.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class ReceivedSpan:
    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: int
    start_ns: int
    end_ns: int
    # Its instrumentation scope ("tailrace.worker", …) and its process's resource.
    scope: str
    resource: dict[str, Any]
    attributes: dict[str, Any]
    status_code: int
    status_message: str

    @property
    def component(self) -> str:
        return self.scope.removeprefix("tailrace.")

    @property
    def pid(self) -> int | None:
        pid = self.resource.get("process.pid")
        return int(pid) if pid is not None else None


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind is not None else None


def _spans_of(request: ExportTraceServiceRequest) -> Iterator[ReceivedSpan]:
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield ReceivedSpan(
                    trace_id=span.trace_id.hex(),
                    span_id=span.span_id.hex(),
                    parent_span_id=span.parent_span_id.hex() or None,
                    name=span.name,
                    kind=span.kind,
                    start_ns=span.start_time_unix_nano,
                    end_ns=span.end_time_unix_nano,
                    scope=scope_spans.scope.name,
                    resource=resource,
                    attributes={a.key: _value(a.value) for a in span.attributes},
                    status_code=span.status.code,
                    status_message=span.status.message,
                )


@dataclass
class OtlpReceiver:
    """``with OtlpReceiver() as receiver:`` — point ``OTEL_EXPORTER_OTLP_ENDPOINT`` at
    ``receiver.endpoint``; ``receiver.spans`` is everything received so far."""

    spans: list[ReceivedSpan] = field(default_factory=list)
    # Keep only the count (a benchmark's millions of spans need no memory).
    count_only: bool = False
    received: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                request = ExportTraceServiceRequest.FromString(body)
                receiver._add(list(_spans_of(request)))
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def env(self, **more: str) -> dict[str, str]:
        """The ``OTEL_*`` variables that send a process's spans here, promptly."""
        return {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            **more,
        }

    def _add(self, spans: list[ReceivedSpan]) -> None:
        with self._lock:
            self.received += len(spans)
            if not self.count_only:
                self.spans.extend(spans)
            self._lock.notify_all()

    def wait_for(
        self, condition: Callable[[list[ReceivedSpan]], bool], timeout: float = 60.0
    ) -> list[ReceivedSpan]:
        """Wait until ``condition(spans)`` holds; returns the spans (AssertionError after
        ``timeout`` seconds, with what arrived)."""
        with self._lock:
            if not self._lock.wait_for(lambda: condition(self.spans), timeout):
                names = sorted({f"{s.component}:{s.name}" for s in self.spans})
                raise AssertionError(f"spans never matched; received {len(self.spans)}: {names}")
            return list(self.spans)

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def whole(spans: list[ReceivedSpan], trace_id: str) -> bool:
    """Every span of the trace has its parent here too. Each process exports in batches
    of its own, so a span may arrive before the one it ended inside (a worker's
    ``running`` before its ``celery.run``): wait for this before reading parents."""
    ours = [s for s in spans if s.trace_id == trace_id]
    ids = {s.span_id for s in ours}
    return all(s.parent_span_id is None or s.parent_span_id in ids for s in ours)


def crossings(spans: list[ReceivedSpan], trace_id: str | None = None) -> int:
    """How many times a trace crosses between Tailrace's components (scheduler, worker,
    triggerer, api-server): each span whose parent was made by another component is one
    hop carried by trace context. Spans of other scopes (the HTTP provider's, a task's
    own) belong to their parent's component. A span whose parent has not arrived counts
    no hop: count a trace once it is ``whole``."""
    by_id = {s.span_id: s for s in spans if trace_id is None or s.trace_id == trace_id}

    def component(span: ReceivedSpan) -> str | None:
        seen = 0
        while not span.scope.startswith("tailrace.") or span.scope.startswith("tailrace.providers"):
            parent = by_id.get(span.parent_span_id or "")
            if parent is None or seen > len(by_id):
                return None
            span, seen = parent, seen + 1
        return span.component

    hops = 0
    for span in by_id.values():
        parent = by_id.get(span.parent_span_id or "")
        if parent is None:
            continue
        mine, theirs = component(span), component(parent)
        if mine is not None and theirs is not None and mine != theirs:
            hops += 1
    return hops
