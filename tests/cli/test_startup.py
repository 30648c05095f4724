"""`tailrace --help` and `--version` load only what they show (speed: benchmarks/bench_cli)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import tailrace
from tailrace.config import COMPONENTS
from tailrace.db.migrate import head_revision
from tailrace.db.revisions import newest_revision

# What a command may import only once it runs.
HEAVY = (
    "sqlalchemy",
    "alembic",
    "httpx",
    "starlette",
    "tailrace.sdk",
    "tailrace.db",
    "tailrace.config",
    "tailrace.scheduler",
    "tailrace.dag_processing",
)


def _imported(*args: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "tailrace", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "80"},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return {
        line.split("|")[-1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    }


@pytest.mark.parametrize(
    "args", [("--help",), ("--version",), ("dags", "--help"), ("standalone", "--help")]
)
def test_help_and_version_import_nothing_of_the_core(args: tuple[str, ...]) -> None:
    modules = _imported(*args)
    assert "typer" in modules  # the measurement works
    loaded = sorted(m for m in modules if m.split(".")[0] in HEAVY or m.startswith(HEAVY))
    assert loaded == []


def test_version_prints_the_package_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tailrace", "--version"], capture_output=True, text=True
    )
    assert (done.returncode, done.stdout) == (0, f"tailrace {tailrace.__version__}\n")


def test_the_sdk_is_still_there_for_dag_files() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from tailrace import *; print(DAG.__name__, dag.__name__)"],
        capture_output=True,
        text=True,
    )
    assert done.stdout.split() == ["DAG", "dag"], done.stderr


def test_the_newest_revision_without_alembic_is_alembics_head() -> None:
    assert newest_revision() == head_revision()


def test_the_check_help_names_every_component() -> None:
    from tailrace.cli._services import _CHECK_HELP

    assert f"({', '.join(COMPONENTS)})" in _CHECK_HELP


def test_reading_settings_and_errors_loads_no_dag_machinery() -> None:
    code = (
        "import sys, tailrace.config, tailrace.db.errors, tailrace.serialization; "
        "print(sorted(m for m in sys.modules if m.startswith(('tailrace.sdk._dag', "
        "'tailrace.sdk._baseoperator', 'tailrace.serialization._serialize'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "[]", done.stderr


def test_commands_on_the_database_load_no_orm() -> None:
    """Tables are Core tables declared as classes (ADR 0043): `dags list` and `dags trigger`
    reach the database without the ORM's import and mappers."""
    code = (
        "import sys, tailrace.actions, tailrace.cli._dags, tailrace.db.models; "
        "print(sorted(m for m in sys.modules if m.startswith('sqlalchemy.orm')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "[]", done.stderr
