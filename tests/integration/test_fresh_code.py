"""Workers run the code on disk when a try starts, the helper modules beside the DAG file
included: a helper edited between two runs is what the second run uses (ADR 0024)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tailrace.dagfiles import IMPORT_PATH_VARIABLE, DagFileCache, prepare_import_path
from tailrace.testing import DagHarness

WriteDag = Callable[[str, str], Path]

DAG = """
from datetime import datetime
from tailrace import dag, task
from {package}.rules import rate

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def priced():
    @task
    def quote():
        return rate()

    quote()

priced()
"""


def _package(dags_folder: Path) -> str:
    # Each test its own package: earlier tests' DAGs folders may be on sys.path too.
    return "helpers_" + dags_folder.parent.name.replace("-", "_")


def _dag(dags_folder: Path) -> str:
    return DAG.replace("{package}", _package(dags_folder))


def _write_helper(dags_folder: Path, value: int) -> None:
    package = dags_folder / _package(dags_folder)
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text("")
    # Same size each time, and maybe within the same second: only the contents differ.
    (package / "rules.py").write_text(f"def rate():\n    return {value}\n")


def test_a_helper_module_edited_between_two_runs_is_the_new_code_in_the_second(
    harness: DagHarness, write_dag: WriteDag, dags_folder: Path
) -> None:
    _write_helper(dags_folder, 1)
    write_dag("priced.py", _dag(dags_folder))
    harness.parse()
    first = harness.trigger("priced")
    assert harness.run(first)["state"] == "success"
    assert harness.xcom(first, "quote") == 1

    _write_helper(dags_folder, 2)
    second = harness.trigger("priced")
    assert harness.run(second)["state"] == "success"
    assert harness.xcom(second, "quote") == 2


def test_the_file_cache_imports_a_dag_file_again_when_a_helper_beside_it_changed(
    write_dag: WriteDag, dags_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv(IMPORT_PATH_VARIABLE, raising=False)
    _write_helper(dags_folder, 1)
    path = str(write_dag("priced.py", _dag(dags_folder)).resolve())
    prepare_import_path(dags_folder)
    cache = DagFileCache()
    first = cache.get(path)
    assert cache.get(path) is first, "nothing changed: the import is reused"

    _write_helper(dags_folder, 2)
    rules = dags_folder / _package(dags_folder) / "rules.py"
    os.utime(rules, ns=(rules.stat().st_atime_ns, rules.stat().st_mtime_ns + 1))
    second = cache.get(path)
    assert second is not first
    quote = second.dags["priced"].get_task("quote")
    assert quote.python_callable() == 2  # type: ignore[attr-defined]
    for name in [m for m in sys.modules if m.startswith(_package(dags_folder))]:
        del sys.modules[name]  # imported here, from this test's folder
