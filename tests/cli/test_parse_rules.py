"""When a command parses the DAG folders itself, and what it says about a broken DAG."""

from __future__ import annotations

import json
import os
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from tailrace.cli._parse import import_error_for, stale_reason
from tailrace.dag_processing import parse_and_sync
from tailrace.db import read_only_engine
from tailrace.db.models import Dag
from tailrace.testing import run_cli

ONE = """
from datetime import datetime
from tailrace import dag, task

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def {dag_id}():
    @task
    def hello():
        return 1

    hello()

{dag_id}()
"""


def _dag(dag_id: str) -> str:
    return textwrap.dedent(ONE.format(dag_id=dag_id))


def _reason(engine: Engine, folder: Path, dag_id: str | None = None) -> str | None:
    with read_only_engine(engine).connect() as conn:
        return stale_reason(conn, folder, dag_id)


def _touch_later(path: Path) -> None:
    """Set ``path``'s modification time to now: after every parse so far began (each
    takes a child process's start, far longer than the file clock's granularity)."""
    os.utime(path)


def test_the_database_reflects_a_folder_until_a_file_changes_appears_or_goes(
    engine: Engine, dags_folder: Path
) -> None:
    first = dags_folder / "first.py"
    first.write_text(_dag("first"))
    assert _reason(engine, dags_folder) == f"{dags_folder} has not been parsed yet"

    parse_and_sync(engine, str(dags_folder), datetime.now(UTC))
    assert _reason(engine, dags_folder) is None
    assert _reason(engine, dags_folder, "first") is None
    assert _reason(engine, dags_folder, "nope") == "DAG 'nope' is not in the database"

    _touch_later(first)
    assert _reason(engine, dags_folder) == f"{first} changed since it was last parsed"
    parse_and_sync(engine, str(dags_folder), datetime.now(UTC))
    assert _reason(engine, dags_folder) is None

    second = dags_folder / "second.py"
    second.write_text(_dag("second"))
    _touch_later(second)
    assert _reason(engine, dags_folder) == f"{second} changed since it was last parsed"
    parse_and_sync(engine, str(dags_folder), datetime.now(UTC))

    second.unlink()
    assert _reason(engine, dags_folder) == f"{second} is gone"


def test_a_broken_file_is_found_by_the_dag_id_it_mentions(
    engine: Engine, dags_folder: Path
) -> None:
    (dags_folder / "broken.py").write_text("from tailrace import dag\n\ndag(  # broken_dag\n")
    (dags_folder / "other.py").write_text("import no_such_module  # a dag\n")
    parse_and_sync(engine, str(dags_folder), datetime.now(UTC))
    with read_only_engine(engine).connect() as conn:
        error = import_error_for(conn, "broken_dag")
        assert import_error_for(conn, "unrelated") is None
        # Never parsed, so not known as this file's DAG: found only by the mention.
        assert import_error_for(conn, "broken_dag", mentioned=False) is None
    assert error is not None
    assert (Path(str(error["filename"])).name, error["line"]) == ("broken.py", 3)
    assert "was never closed" in str(error["message"])


@pytest.fixture
def cli_env(database_url: str, dags_folder: Path) -> dict[str, str]:
    return {
        **os.environ,
        "TAILRACE_DATABASE_URL": database_url,
        "TAILRACE_DAGS_FOLDER": str(dags_folder),
        "COLUMNS": "200",
    }


def _last_parsed(engine: Engine, dag_id: str) -> datetime | None:
    with read_only_engine(engine).connect() as conn:
        return conn.scalar(select(Dag.last_parsed_at).where(Dag.dag_id == dag_id))


@pytest.mark.parametrize("db_backend", ["sqlite"])
def test_trigger_parses_only_when_the_database_does_not_reflect_the_file(
    cli_env: dict[str, str], dags_folder: Path, engine: Engine
) -> None:
    dag_file = dags_folder / "quick.py"
    dag_file.write_text(_dag("quick"))
    first = run_cli(cli_env, "dags", "trigger", "quick")
    assert first.returncode == 0, first.stderr
    parsed = _last_parsed(engine, "quick")
    assert parsed is not None

    again = run_cli(cli_env, "dags", "trigger", "quick", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["dag_id"] == "quick"
    assert _last_parsed(engine, "quick") == parsed  # nothing was parsed

    _touch_later(dag_file)
    changed = run_cli(cli_env, "dags", "trigger", "quick")
    assert changed.returncode == 0, changed.stderr
    reparsed = _last_parsed(engine, "quick")
    assert reparsed is not None and reparsed > parsed


@pytest.mark.parametrize("db_backend", ["sqlite"])
def test_triggering_a_dag_whose_file_fails_to_import_says_why_once(
    cli_env: dict[str, str], dags_folder: Path
) -> None:
    (dags_folder / "cycle.py").write_text(
        textwrap.dedent(
            """
            from datetime import datetime
            from tailrace import dag, task

            @dag(schedule=None, start_date=datetime(2026, 1, 1))
            def cyclic():
                @task
                def a(): ...

                @task
                def b(): ...

                x, y = a(), b()
                x >> y
                y >> x

            cyclic()
            """
        )
    )
    out = run_cli(cli_env, "dags", "trigger", "cyclic")
    assert out.returncode == 1
    error = " ".join(out.stderr.split())
    assert error.startswith(
        "Error: DAG 'cyclic' failed to import: cycle.py, line 15: DagCycleError: "
        "DAG 'cyclic' has a dependency cycle: a -> b -> a."
    ), error
    assert error.count("line 15") == 1
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("db_backend", ["sqlite"])
def test_a_known_dag_whose_file_breaks_runs_its_last_good_version_with_a_warning(
    cli_env: dict[str, str], dags_folder: Path
) -> None:
    dag_file = dags_folder / "fragile.py"
    dag_file.write_text(_dag("fragile"))
    assert run_cli(cli_env, "dags", "trigger", "fragile").returncode == 0
    dag_file.write_text(_dag("fragile") + "\nraise RuntimeError('half-edited')\n")
    _touch_later(dag_file)
    out = run_cli(cli_env, "dags", "trigger", "fragile")
    assert out.returncode == 0, out.stderr
    warning = " ".join(out.stderr.split())
    assert "fragile.py, line 15 fails to import (RuntimeError: half-edited)" in warning
    assert "this run uses the last version of fragile that parsed" in warning
