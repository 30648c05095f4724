"""Fixtures of the integration tests: a harness whose scheduler and triggerer read a fake
clock (``clocked``), starting now unless a module's ``clock`` fixture says otherwise."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Engine

from tailrace.dag_processing import ParseOptions
from tailrace.testing import DagHarness, FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime.now(UTC))


@pytest.fixture
def clocked(
    engine: Engine, dags_folder: Path, tmp_path: Path, clock: FakeClock
) -> Iterator[DagHarness]:
    # DAGs run from the first parse (and on their schedule), without unpausing them.
    options = ParseOptions(paused_at_creation=False)
    with DagHarness(
        engine, dags_folder, log_folder=tmp_path / "logs", clock=clock, parse_options=options
    ) as h:
        yield h
