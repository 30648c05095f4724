"""Turning tracing on from the standard ``OTEL_*`` variables (off unless they ask for it)."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from tailrace.errors import TailraceError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

EXPORTERS = ("otlp", "console", "none")
# The OTLP exporter shipped is OTLP over HTTP with protobuf bodies.
PROTOCOL = "http/protobuf"


class TracingConfigError(TailraceError):
    """An ``OTEL_*`` variable asks for something Tailrace's tracing cannot do."""

    def __init__(self, variable: str, problem: str) -> None:
        self.variable = variable
        self.problem = problem
        super().__init__(f"{variable}: {problem}")


def wanted(env: Mapping[str, str] | None = None) -> bool:
    """Whether the environment turns tracing on: ``OTEL_TRACES_EXPORTER`` names an exporter
    (otlp or console), or, with it unset, an OTLP endpoint is given. ``OTEL_SDK_DISABLED``
    wins over both. Refuses what would otherwise be ignored."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    for variable in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = env.get(variable, "").strip()
        if protocol and protocol != PROTOCOL:
            raise TracingConfigError(
                variable,
                f"{protocol!r} is not supported: Tailrace exports traces over OTLP/HTTP "
                f"with protobuf; set it to {PROTOCOL!r} (and point the endpoint at the "
                "collector's HTTP port, usually 4318)",
            )
    exporters = _exporters(env)
    if exporters is None:
        return bool(
            env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        )
    return exporters != ["none"]


def _exporters(env: Mapping[str, str]) -> list[str] | None:
    value = env.get("OTEL_TRACES_EXPORTER")
    if value is None or not value.strip():
        return None
    names = [n.strip().lower() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in EXPORTERS]
    if unknown or ("none" in names and len(names) > 1):
        raise TracingConfigError(
            "OTEL_TRACES_EXPORTER",
            f"{value!r}: Tailrace exports traces to 'otlp' (OTLP/HTTP) or 'console', or "
            "'none' alone (tracing off)",
        )
    return names


_lock = threading.Lock()
_provider: TracerProvider | None = None
_configured = False


def configure() -> bool:
    """Set this process's tracer provider up once, if the environment asks for tracing;
    returns whether tracing is on. A forked child keeps its parent's (the SDK restarts
    the export thread after a fork)."""
    global _provider, _configured
    with _lock:
        if _configured:
            return _provider is not None
        _configured = True
        if not wanted():
            return False
        _provider = _make_provider()
        from opentelemetry import trace

        trace.set_tracer_provider(_provider)
        return True


def _make_provider() -> TracerProvider:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    from tailrace.tracing._spans import IdGenerator

    attributes: dict[str, str | int] = {
        "process.pid": os.getpid(),
        "host.name": socket.gethostname(),
    }
    named = os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    if not named:
        attributes["service.name"] = "tailrace"
    provider = TracerProvider(resource=Resource.create(attributes), id_generator=IdGenerator())
    for name in _exporters(os.environ) or ["otlp"]:
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        elif name == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    return provider


def provider() -> TracerProvider | None:
    return _provider


def enabled() -> bool:
    return _provider is not None


def force_flush(timeout_millis: int = 30_000) -> None:
    if _provider is not None:
        _provider.force_flush(timeout_millis)


def shutdown() -> None:
    """Export what is buffered and stop (a process whose exit skips ``atexit`` calls it)."""
    if _provider is not None:
        _provider.shutdown()
