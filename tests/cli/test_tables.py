"""Every table the CLI prints, at 80 columns: nothing cut, every column headed; and the
same data as --json."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from rich.console import Console

from tailrace.cli._tables import make_table
from tailrace.testing import run_cli

# Long, yet with room at 80 columns next to the other columns of `dags list`.
LONG_ID = "reconcile_quarterly_revenue"
DAG = f"""
from datetime import datetime
from tailrace import dag, task

@dag(schedule="@daily", start_date=datetime(2026, 1, 1), catchup=False)
def {LONG_ID}():
    @task
    def list_regional_ledgers():
        return ["emea", "americas", "asia_pacific"]

    @task
    def reconcile_regional_ledger(region):
        return len(region)

    @task
    def publish_reconciled_totals(values):
        return sum(values)

    publish_reconciled_totals(
        reconcile_regional_ledger.expand(region=list_regional_ledgers())
    )

{LONG_ID}()
"""
WIDTH = 80


@pytest.fixture
def env(database_url: str, tmp_path: Path) -> dict[str, str]:
    dags = tmp_path / "dags"
    (dags / "finance" / "quarterly").mkdir(parents=True)
    (dags / "finance" / "quarterly" / "reconciliation.py").write_text(textwrap.dedent(DAG))
    (dags / "finance" / "quarterly" / "half_written_dag.py").write_text(
        "from tailrace import dag\nimport a_module_nobody_installed_anywhere\n"
    )
    return {
        **os.environ,
        "TAILRACE_DATABASE_URL": database_url,
        "TAILRACE_DAGS_FOLDER": str(dags),
        "TAILRACE_WORKER_PROCESSES": "2",
        "TAILRACE_NEW_USER_PASSWORD": "correct horse battery staple",
        "COLUMNS": str(WIDTH),
    }


def _header_cells(out: str) -> list[str]:
    """The header cells of the first table in ``out`` (a header may take two lines)."""
    rows = [line.strip("┃").split("┃") for line in out.splitlines() if line.startswith("┃")]
    return [" ".join(" ".join(parts).split()) for parts in zip(*rows, strict=True)]


def _check(out: str, headers: tuple[str, ...], whole: tuple[str, ...] = ()) -> None:
    lines = out.splitlines()
    # The table's lines; a line of prose around it may hold a whole path, soft-wrapped.
    assert all(len(line) <= WIDTH for line in lines if line[:1] in "┏┃┡│├└"), out
    assert "…" not in out, out
    cells = _header_cells(out)
    assert len(cells) == len(headers) and all(cells), out
    text = " ".join(" ".join(lines).split())
    for header in headers:
        assert all(word in text for word in header.split()), (header, out)
    for value in whole:  # ids are never broken across lines
        assert any(value in line for line in lines), (value, out)


def _ok(env: dict[str, str], *args: str, code: int = 0) -> str:
    done = run_cli(env, *args)
    assert done.returncode == code, done.stderr
    return done.stdout


@pytest.mark.parametrize("db_backend", ["sqlite"])
def test_every_table_reads_at_80_columns_and_has_json(env: dict[str, str]) -> None:
    out = _ok(env, "dags", "list")
    _check(out, ("dag_id", "schedule", "paused", "next run (UTC)", "latest run"), (LONG_ID,))
    [listed] = json.loads(_ok(env, "dags", "list", "--json"))
    assert listed["dag_id"] == LONG_ID

    out = _ok(env, "dags", "list-import-errors", code=1)
    _check(out, ("file", "line", "error"), ("finance/quarterly/half_written_dag.py",))
    [error] = json.loads(_ok(env, "dags", "list-import-errors", "--json", code=1))
    assert error["line"] == 2

    out = _ok(env, "dags", "test", LONG_ID)
    _check(
        out,
        ("task", "map", "state", "try", "duration"),
        ("reconcile_regional_ledger", "publish_reconciled_totals"),
    )
    assert json.loads(_ok(env, "dags", "test", LONG_ID, "--json"))["state"] == "success"

    out = _ok(env, "tasks", "list", LONG_ID)
    _check(out, ("task_id", "operator", "upstream", "trigger rule"), ("list_regional_ledgers",))
    tasks = json.loads(_ok(env, "tasks", "list", LONG_ID, "--json"))
    assert [(t["task_id"], t["operator"]) for t in tasks] == [
        ("list_regional_ledgers", "@task"),
        ("reconcile_regional_ledger", "@task (mapped)"),
        ("publish_reconciled_totals", "@task"),
    ]

    uri = "postgresql://reporting_user:s3cret@warehouse.internal.example.com:5432/finance"
    _ok(env, "connections", "add", "finance_warehouse", "--uri", uri, "--description", "x" * 60)
    out = _ok(env, "connections", "list")
    _check(out, ("conn_id", "uri", "source", "description"), ("finance_warehouse",))
    assert "s3cret" not in out
    [conn] = json.loads(_ok(env, "connections", "list", "--json"))
    assert conn["conn_id"] == "finance_warehouse"

    _ok(env, "users", "create", "reconciliation_reviewer", "--role", "viewer")
    _check(_ok(env, "users", "list"), ("username", "role"), ("reconciliation_reviewer",))
    users = json.loads(_ok(env, "users", "list", "--json"))
    assert users == [{"username": "reconciliation_reviewer", "role": "viewer"}]

    _check(_ok(env, "config"), ("setting", "value", "source"), ("iterate_expansion_batch",))
    _check(
        _ok(env, "triggers", "list", "--all"),
        ("id", "trigger", "task", "triggerer", "lease left", "age", "events"),
    )
    _check(
        _ok(env, "streams", "list"),
        ("task", "run", "consumer", "produced", "acked", "pending", "items", "ev/s", "state"),
    )
    assert json.loads(_ok(env, "streams", "list", "--json")) == []


def test_a_table_of_long_values_folds_instead_of_cutting() -> None:
    console = Console(width=WIDTH, record=True, color_system=None)
    path = "warehouse/exports/" + "very_long_directory_name/" * 3 + "orders.py"
    table = make_table(
        ("id", "path", "state", "n"),
        [(LONG_ID, path, "[green]success[/]", "12,345")],
        right=(3,),
    )
    console.print(table)
    out = console.export_text()
    _check(out, ("id", "path", "state", "n"), (LONG_ID, "success", "12,345"))
    folded = "".join(
        line.split("│")[2].strip() for line in out.splitlines() if line.startswith("│")
    )
    assert folded == path


@pytest.mark.parametrize("db_backend", ["sqlite"])
def test_users_create_asks_for_the_password_twice_hidden(tmp_path: Path, database_url: str) -> None:
    env = {**os.environ, "TAILRACE_DATABASE_URL": database_url}
    env.pop("TAILRACE_NEW_USER_PASSWORD", None)
    done = subprocess.run(
        [sys.executable, "-m", "tailrace", "users", "create", "ann", "--role", "admin"],
        input="pw-1\npw-1\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "Password:" in done.stdout and "Repeat for confirmation:" in done.stdout
    assert "pw-1" not in done.stdout
    assert "Created admin ann" in done.stdout
