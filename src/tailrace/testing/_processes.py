"""Tailrace components as real processes, for tests that kill and restart them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

READY = {"scheduler": "Scheduler running", "triggerer": "triggerer running"}


def component_env(
    database_url: str, dags_folder: str | Path, **settings: str | float
) -> dict[str, str]:
    """The environment of ``tailrace`` subprocesses sharing one database and dags folder:
    this process's, plus ``TAILRACE_<NAME>`` for each setting (``worker_processes=2``)."""
    return {
        **os.environ,
        "TAILRACE_DATABASE_URL": database_url,
        "TAILRACE_DAGS_FOLDER": str(dags_folder),
        **{f"TAILRACE_{name.upper()}": str(value) for name, value in settings.items()},
    }


def run_cli(
    env: Mapping[str, str], *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``tailrace ARGS`` to completion and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "tailrace", *args],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_component(env: Mapping[str, str], command: str) -> subprocess.Popen[str]:
    """Start ``tailrace COMMAND`` (scheduler, triggerer, standalone) in its own process
    group, and return it once it says it is ready (database migrated, DAGs parsed)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tailrace", command],
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    ready = READY.get(command, "Ctrl-C stops")
    for line in proc.stdout:
        if ready in line:
            return proc
    raise RuntimeError(f"`tailrace {command}` exited early with code {proc.wait()}")


def stop_component(proc: subprocess.Popen[str]) -> int | None:
    """SIGTERM a component still running and wait; returns its exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    if proc.stdout is not None:
        proc.stdout.close()
    return proc.returncode
