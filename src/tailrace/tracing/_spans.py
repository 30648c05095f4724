"""Making spans: live ones around work this process does, and spans written after the
fact (a try's queued wait, a run) with ids every process derives alike."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from tailrace.tracing import _setup

__all__ = [
    "IdGenerator",
    "context_of",
    "current_traceparent",
    "ids_of",
    "live_span",
    "record_span",
    "traceparent",
    "traceparent_of",
    "tracer",
]

Attributes = Mapping[str, str | int | float | bool]

_forced: contextvars.ContextVar[tuple[int | None, int | None]] = contextvars.ContextVar(
    "tailrace_forced_ids", default=(None, None)
)
_propagator = TraceContextTextMapPropagator()
# Error texts (tracebacks) are cut to this many characters in a span's status.
STATUS_CHARS = 2000


class IdGenerator(RandomIdGenerator):
    """Random ids, except where Tailrace derived them (``_forced``)."""

    def generate_span_id(self) -> int:
        span_id = _forced.get()[1]
        return span_id if span_id is not None else super().generate_span_id()

    def generate_trace_id(self) -> int:
        trace_id = _forced.get()[0]
        return trace_id if trace_id is not None else super().generate_trace_id()

    def is_trace_id_random(self) -> bool:
        return _forced.get()[0] is None


@contextlib.contextmanager
def _ids(trace_id: int | None, span_id: int | None) -> Iterator[None]:
    token = _forced.set((trace_id, span_id))
    try:
        yield
    finally:
        _forced.reset(token)


def tracer(component: str) -> trace.Tracer:
    """The tracer of a component: its spans' instrumentation scope is ``tailrace.<component>``
    (what tells the scheduler's spans from a worker's or a triggerer's)."""
    provider = _setup.provider()
    if provider is None:
        return trace.get_tracer(f"tailrace.{component}")
    return provider.get_tracer(f"tailrace.{component}")


def _sampled(trace_id: int) -> bool:
    provider = _setup.provider()
    if provider is None:
        return False
    decision = provider.sampler.should_sample(None, trace_id, "tailrace").decision
    return decision in (Decision.RECORD_AND_SAMPLE,)


def parent(trace_id: int, span_id: int | None) -> otel_context.Context:
    """A context whose parent is the span ``span_id`` of ``trace_id`` (a root: None)."""
    if span_id is None:
        return otel_context.Context()
    flags = trace.TraceFlags(trace.TraceFlags.SAMPLED if _sampled(trace_id) else 0)
    span_context = SpanContext(trace_id, span_id, is_remote=True, trace_flags=flags)
    return trace.set_span_in_context(NonRecordingSpan(span_context), otel_context.Context())


def _ns(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)


def record_span(
    component: str,
    name: str,
    *,
    start: datetime,
    end: datetime,
    trace_id: int,
    parent_span_id: int | None,
    span_id: int | None = None,
    context: otel_context.Context | None = None,
    attributes: Attributes | None = None,
    error: str | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
) -> SpanContext:
    """A span that already happened, from ``start`` to ``end``; returns its context.
    ``context`` (a parent from elsewhere, e.g. a traceparent) wins over ``parent_span_id``."""
    with _ids(trace_id if parent_span_id is None else None, span_id):
        span = tracer(component).start_span(
            name,
            context=context if context is not None else parent(trace_id, parent_span_id),
            kind=kind,
            attributes=attributes,
            start_time=_ns(start),
        )
    if error is not None:
        span.set_status(Status(StatusCode.ERROR, error[:STATUS_CHARS]))
    span.end(end_time=max(_ns(end), _ns(start)))
    return span.get_span_context()


@contextlib.contextmanager
def live_span(
    component: str,
    name: str,
    *,
    context: otel_context.Context | None = None,
    span_id: int | None = None,
    attributes: Attributes | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
) -> Iterator[trace.Span]:
    """A span around the block, current inside it (task code's spans become its children)."""
    with _ids(None, span_id):
        span = tracer(component).start_span(name, context=context, kind=kind, attributes=attributes)
    with trace.use_span(span, end_on_exit=True, record_exception=False):
        yield span


def traceparent(trace_id: int, span_id: int) -> str:
    """The W3C ``traceparent`` naming span ``span_id`` of ``trace_id``."""
    flags = "01" if _sampled(trace_id) else "00"
    return f"00-{trace_id:032x}-{span_id:016x}-{flags}"


def traceparent_of(span_context: SpanContext) -> str:
    return (
        f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-"
        f"{int(span_context.trace_flags) & 0xFF:02x}"
    )


def current_traceparent() -> str | None:
    """The current span's W3C ``traceparent``, to carry to another process."""
    carrier: dict[str, Any] = {}
    _propagator.inject(carrier)
    value = carrier.get("traceparent")
    return str(value) if value is not None else None


def context_of(value: str | None) -> otel_context.Context | None:
    """The context a carried ``traceparent`` names (None: there is none, or it is invalid)."""
    if not value:
        return None
    extracted = _propagator.extract({"traceparent": value}, context=otel_context.Context())
    if not trace.get_current_span(extracted).get_span_context().is_valid:
        return None
    return extracted


def ids_of(value: str | None) -> tuple[int, int] | None:
    """(trace id, span id) of a carried ``traceparent``."""
    extracted = context_of(value)
    if extracted is None:
        return None
    span_context = trace.get_current_span(extracted).get_span_context()
    return span_context.trace_id, span_context.span_id
