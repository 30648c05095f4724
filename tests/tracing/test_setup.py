"""Which OTEL_* settings turn tracing on, and which are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailrace.testing import component_env, run_cli
from tailrace.tracing import (
    TracingConfigError,
    run_span_id,
    run_trace_id,
    trigger_run_span_id,
    try_span_id,
    wanted,
)


def test_off_by_default() -> None:
    assert not wanted({})


@pytest.mark.parametrize(
    "env",
    [
        {"OTEL_TRACES_EXPORTER": "otlp"},
        {"OTEL_TRACES_EXPORTER": "console,otlp"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"},
        {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"},
    ],
)
def test_an_exporter_or_an_endpoint_turns_it_on(env: dict[str, str]) -> None:
    assert wanted(env)


@pytest.mark.parametrize(
    "env",
    [
        {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"},
        {"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"},
    ],
)
def test_none_and_sdk_disabled_win(env: dict[str, str]) -> None:
    assert not wanted(env)


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"),
        ({"OTEL_TRACES_EXPORTER": "none,otlp"}, "OTEL_TRACES_EXPORTER"),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"},
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        ),
    ],
)
def test_what_cannot_be_done_is_refused_naming_the_variable(
    env: dict[str, str], variable: str
) -> None:
    with pytest.raises(TracingConfigError) as refused:
        wanted(env)
    assert refused.value.variable == variable
    assert variable in str(refused.value)


def test_ids_are_derived_alike_and_differ_per_run_try_and_trigger_run() -> None:
    trace = run_trace_id("d", "r", 1)
    assert trace == run_trace_id("d", "r", 1)
    assert trace != run_trace_id("d", "r", 2) and trace.bit_length() <= 128
    spans = {
        run_span_id(trace),
        try_span_id(trace, 1, 1),
        try_span_id(trace, 1, 2),
        trigger_run_span_id(trace, "a"),
        trigger_run_span_id(trace, "b"),
    }
    assert len(spans) == 5 and all(0 < s < 2**64 for s in spans)


def test_a_component_refuses_an_exporter_it_cannot_honour_at_start(
    tmp_path: Path, dags_folder: Path
) -> None:
    env = component_env(f"sqlite:///{tmp_path / 'db.sqlite'}", dags_folder)
    env.update(OTEL_TRACES_EXPORTER="zipkin", TAILRACE_HOME=str(tmp_path))
    started = run_cli(env, "triggerer", timeout=60)
    assert started.returncode == 1
    assert "OTEL_TRACES_EXPORTER" in started.stderr and "'zipkin'" in started.stderr
