"""pytest fixtures for DAG tests: ``pytest_plugins = ["tailrace.testing.pytest_plugin"]``
in your top-level ``conftest.py``."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tailrace.testing._timeskip import DEFAULT_START, TimeSkippingHarness


@pytest.fixture
def time_skipping(tmp_path: Path) -> Iterator[Callable[..., TimeSkippingHarness]]:
    """Opens a :class:`~tailrace.testing.TimeSkippingHarness` over a DAGs folder or file,
    closed after the test: ``env = time_skipping("dags/", start=datetime(...))``."""
    numbers = itertools.count(1)
    with ExitStack() as stack:

        def open_harness(
            dags: str | Path, *, start: datetime = DEFAULT_START, **kwargs: Any
        ) -> TimeSkippingHarness:
            work = tmp_path / f"time-skipping-{next(numbers)}"
            work.mkdir()
            return stack.enter_context(
                TimeSkippingHarness(dags, start=start, work_dir=work, **kwargs)
            )

        yield open_harness
