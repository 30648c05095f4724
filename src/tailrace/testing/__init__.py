"""Seams for testing Tailrace and DAGs built on it."""

from tailrace.testing._clock import FakeClock
from tailrace.testing._db import (
    copy_sqlite_database,
    migrate_database,
    postgres_server_url,
    postgres_unavailable_reason,
    temporary_postgres_database,
    temporary_sqlite_url,
)
from tailrace.testing._harness import DagHarness
from tailrace.testing._processes import (
    component_env,
    kill_component,
    run_cli,
    start_component,
    stop_component,
    stop_components,
)
from tailrace.testing._timeskip import (
    EventRecording,
    RecordedEvent,
    StuckError,
    TimeSkippingHarness,
    VirtualTimeLoop,
)
from tailrace.testing._wait import wait_for
from tailrace.testing._workloads import manual_try

__all__ = [  # noqa: RUF022 - grouped by concept
    # running DAGs and components
    "DagHarness",
    "TimeSkippingHarness",
    "StuckError",
    "EventRecording",
    "RecordedEvent",
    "VirtualTimeLoop",
    "component_env",
    "kill_component",
    "run_cli",
    "start_component",
    "stop_component",
    "stop_components",
    "manual_try",
    # time
    "FakeClock",
    "wait_for",
    # databases
    "copy_sqlite_database",
    "migrate_database",
    "postgres_server_url",
    "postgres_unavailable_reason",
    "temporary_postgres_database",
    "temporary_sqlite_url",
]
