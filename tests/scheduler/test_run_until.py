"""`Scheduler.run_until`, the seam `tailrace dags test`, `dag.test()` and the harness drive
a scheduler through: it neither waits for a wake-up nobody sends nor steps for nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine
from test_kept_runs import Chain  # a chain planned by a real scheduler; the test plays workers


@pytest.fixture
def chain(engine: Engine, tmp_path: Path) -> Iterator[Chain]:
    c = Chain(engine, tmp_path / "logs", 2)
    yield c
    c.scheduler.stop()


def test_run_until_looks_at_everything_at_once_and_asks_before_each_step(chain: Chain) -> None:
    # `tailrace dags test` makes its run and wakes nobody; its scheduler polls once an
    # hour here. The first step looks at everything at once instead of waiting for a
    # wake-up (it used to wait for the poll: 5 s by default, twice a `dags test`).
    assert chain.scheduler.run_until(lambda: bool(chain.executor.workloads), timeout=30)
    assert [w.task_id for w in chain.executor.take()] == ["t0"]
    # A condition that already holds costs no step (which would wait for the poll).
    steps = chain.scheduler.steps
    assert chain.scheduler.run_until(lambda: True, timeout=30)
    assert chain.scheduler.steps == steps
