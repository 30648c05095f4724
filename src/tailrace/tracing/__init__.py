"""OpenTelemetry traces of DAG runs: one trace per run, its context carried in every
workload from the scheduler to workers (local and Celery) to the triggerer and back.

Off unless the standard ``OTEL_*`` variables turn it on (``OTEL_TRACES_EXPORTER=otlp``, or
an ``OTEL_EXPORTER_OTLP_ENDPOINT``); see docs/concepts/tracing.md and ADR 0022.
"""

from tailrace.tracing._ids import (
    run_span_id,
    run_trace_id,
    trace_id_hex,
    trigger_run_span_id,
    try_span_id,
)
from tailrace.tracing._setup import (
    TracingConfigError,
    configure,
    enabled,
    force_flush,
    shutdown,
    wanted,
)
from tailrace.tracing._spans import (
    STATUS_CHARS,
    context_of,
    current_traceparent,
    ids_of,
    live_span,
    record_span,
    traceparent,
    traceparent_of,
    tracer,
)

__all__ = [  # noqa: RUF022 - grouped by concept
    "STATUS_CHARS",
    # turning it on
    "TracingConfigError",
    "configure",
    "enabled",
    "force_flush",
    "shutdown",
    "wanted",
    # ids every process derives alike
    "run_span_id",
    "run_trace_id",
    "trace_id_hex",
    "trigger_run_span_id",
    "try_span_id",
    # spans and their context across processes
    "context_of",
    "current_traceparent",
    "ids_of",
    "live_span",
    "record_span",
    "traceparent",
    "traceparent_of",
    "tracer",
]
