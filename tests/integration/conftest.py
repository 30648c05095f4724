from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from tailrace.testing import DagHarness

WriteDag = Callable[[str, str], Path]


@pytest.fixture
def dags_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "dags"
    folder.mkdir()
    return folder


@pytest.fixture
def write_dag(dags_folder: Path) -> WriteDag:
    """Write a DAG file (dedented) into the test's dags folder."""

    def write(name: str, source: str) -> Path:
        path = dags_folder / name
        path.write_text(textwrap.dedent(source))
        return path

    return write


@pytest.fixture
def harness(engine: Engine, dags_folder: Path, tmp_path: Path) -> Iterator[DagHarness]:
    with DagHarness(engine, dags_folder, log_folder=tmp_path / "logs") as h:
        yield h
