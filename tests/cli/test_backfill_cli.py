"""`tailrace backfill` as a user runs it: a real scheduler process starts the runs the
CLI's backfill creates, and `dags list-runs` shows them as backfill runs."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tailrace.testing import run_cli, start_component, stop_component, wait_for

DAGS = """
from datetime import datetime
from tailrace import dag, task

# No scheduled runs: the schedule ended before the backfilled days.
@dag(schedule="@daily", start_date=datetime(2026, 1, 1), end_date=datetime(2026, 2, 1))
def cli_daily():
    @task
    def work(ds=None):
        return ds

    work()

cli_daily()

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def cli_manual():
    @task
    def work():
        return 1

    work()

cli_manual()
"""

RANGE = ("--dag-id", "cli_daily", "--from-date", "2026-11-01", "--to-date", "2026-11-03")


@pytest.fixture
def cli_env(database_url: str, tmp_path: Path) -> dict[str, str]:
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "daily.py").write_text(textwrap.dedent(DAGS))
    return {
        **os.environ,
        "TAILRACE_HOME": str(tmp_path / "home"),
        "TAILRACE_DATABASE_URL": database_url,
        "TAILRACE_DAGS_FOLDER": str(dags),
        "TAILRACE_WORKER_PROCESSES": "2",
        "COLUMNS": "200",
    }


@pytest.fixture
def scheduler(cli_env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    proc = start_component(cli_env, "scheduler")
    yield proc
    assert stop_component(proc) == 0


def _runs(env: dict[str, str]) -> list[dict[str, Any]]:
    out = run_cli(env, "dags", "list-runs", "cli_daily", "--json")
    assert out.returncode == 0, out.stderr
    runs: list[dict[str, Any]] = json.loads(out.stdout)
    return runs


def test_backfill_create_runs_each_day_on_the_scheduler(
    cli_env: dict[str, str], scheduler: subprocess.Popen[str]
) -> None:
    dry = run_cli(cli_env, "backfill", "create", *RANGE, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "2026-11-01T00:00:00+00:00" in dry.stdout and "2026-11-03T00:00:00+00:00" in dry.stdout
    assert _runs(cli_env) == []  # a dry run creates nothing

    created = run_cli(
        cli_env, "backfill", "create", *RANGE, "--max-active-runs", "1", "--run-backwards", "--json"
    )
    assert created.returncode == 0, created.stderr
    backfill = json.loads(created.stdout)
    assert backfill["max_active_runs"] == 1

    def all_succeeded() -> list[dict[str, Any]]:
        runs = _runs(cli_env)
        return runs if len(runs) == 3 and {r["state"] for r in runs} == {"success"} else []

    runs = wait_for(all_succeeded, timeout=120)
    assert {(r["run_type"], r["backfill_id"]) for r in runs} == {("backfill", backfill["id"])}
    # Backwards, one at a time: the latest day started first.
    by_start = sorted(runs, key=lambda r: r["start_date"])
    assert [r["logical_date"][:10] for r in by_start] == ["2026-11-03", "2026-11-02", "2026-11-01"]
    table = run_cli(cli_env, "dags", "list-runs", "cli_daily")
    assert table.stdout.count(f"backfill {backfill['id']}") == 3

    listed = json.loads(run_cli(cli_env, "backfill", "list", "--json").stdout)
    assert listed[0]["completed_at"] is not None
    assert [d["state"] for d in listed[0]["dates"]] == ["success"] * 3
    again = run_cli(cli_env, "backfill", "create", *RANGE, "--reprocess-behavior", "completed")
    assert again.returncode == 0, again.stderr
    assert "reprocess completed" in again.stdout


def test_what_cannot_be_backfilled_is_one_clear_line(cli_env: dict[str, str]) -> None:
    manual = run_cli(cli_env, "backfill", "create", "--dag-id", "cli_manual", *RANGE[2:])
    assert manual.returncode == 1
    assert "non-periodic schedule" in manual.stderr and "Traceback" not in manual.stderr
    behaviour = run_cli(cli_env, "backfill", "create", *RANGE, "--reprocess-behavior", "some")
    assert behaviour.returncode == 1
    assert "must be one of none, failed, completed" in behaviour.stderr
    missing = run_cli(cli_env, "backfill", "cancel", "42")
    assert missing.returncode == 1 and "No backfill has id 42" in missing.stderr
