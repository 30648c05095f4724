"""Tailrace components as real processes, for tests that kill and restart them."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

READY = {
    "scheduler": "Scheduler running",
    "triggerer": "triggerer running",
    "worker": "Worker ready",
}


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


def start_component(
    env: Mapping[str, str], command: str, *args: str, output: Path | None = None
) -> subprocess.Popen[str]:
    """Start ``tailrace COMMAND ARGS`` (scheduler, triggerer, worker, standalone …) in its
    own process group, and return it once it says it is ready (database migrated, DAGs
    parsed, broker connected). Its output is read on a thread from then on, so a chatty
    component never blocks on a full pipe; ``output`` keeps all of it, for a failing test."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tailrace", command, *args],
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    sink = open(output, "a", encoding="utf-8") if output is not None else None  # noqa: SIM115
    ready = READY.get(command, "Ctrl-C stops")
    # The banner is wrapped at the terminal's width (COLUMNS): the phrase may span lines.
    recent = ""
    try:
        for line in proc.stdout:
            if sink is not None:
                sink.write(line)
            recent = f"{recent[-200:]} {line.strip()}"
            if ready in recent:
                threading.Thread(target=_drain, args=(proc, sink), daemon=True).start()
                return proc
        raise RuntimeError(f"`tailrace {command}` exited early with code {proc.wait()}")
    except BaseException:
        # Never ready (or the test gave up waiting): it must not live on to steal the next
        # test's work.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        if sink is not None:
            sink.close()
        raise


def _drain(proc: subprocess.Popen[str], sink: TextIO | None) -> None:
    assert proc.stdout is not None
    try:
        with contextlib.suppress(ValueError, OSError):  # closed by stop_component
            for line in proc.stdout:
                if sink is not None:
                    sink.write(line)
                    sink.flush()
    finally:
        if sink is not None:
            sink.close()


def stop_component(proc: subprocess.Popen[str]) -> int | None:
    """SIGTERM a component still running and wait; returns its exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    if proc.stdout is not None:
        proc.stdout.close()
    return proc.returncode


def kill_component(proc: subprocess.Popen[str]) -> None:
    """``kill -9`` a component and every process it started (a lost machine)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def stop_components(procs: list[subprocess.Popen[str]]) -> None:
    """Stop components started together: Celery workers first, and cold (a warm shutdown
    waits for running tasks, which may wait on something that will never come); then the
    rest, last started first; then anything any of them left behind (a DAG parser)."""
    workers = [p for p in procs if isinstance(p.args, list) and "worker" in p.args]
    for proc in workers:
        kill_component(proc)
    for proc in reversed([p for p in procs if p not in workers]):
        stop_component(proc)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
