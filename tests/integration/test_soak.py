"""Two minutes of benchmarks/bench_soak: the log's tables stay bounded (no timing checked)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.exclusive]

RETENTION, CLEAN_EVERY, RUNS_PER_HOUR = 20, 30, 1000


@pytest.mark.timeout(420)
def test_two_minutes_of_endless_stream_short_runs_and_db_clean_stay_bounded() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.bench_soak",
            "soak",
            "--json",
            "--minutes",
            "2",
            "--sample-seconds",
            "10",
            "--retention",
            str(RETENTION),
            "--clean-every",
            str(CLEAN_EVERY),
            "--short-runs-per-hour",
            str(RUNS_PER_HOUR),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"},
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)["results"]
    samples = result["samples"]
    assert len(samples) >= 6
    produced = samples[-1]["events"]
    most_events = max(s["trigger_event"] for s in samples)
    # Without pruning every event stays: the table would hold all that were produced.
    # With it, at most the backpressure window (2000) plus what was acknowledged since the
    # last prune.
    assert produced > 5 * most_events, (produced, most_events)
    # Bounded, not growing: the second half of the soak holds no more than the first did
    # (with room for pruning that lags on a loaded machine), though it produced as much.
    half = len(samples) // 2
    early = max(s["trigger_event"] for s in samples[:half])
    late = max(s["trigger_event"] for s in samples[half:])
    assert late <= max(2 * early, 2000 + 5000), (early, late)
    # Runs and their streams go once past retention and the next db clean: at most what
    # starts in a retention period plus a clean interval, with room for slow machines.
    runs_window = RUNS_PER_HOUR * (RETENTION + CLEAN_EVERY) / 3600
    assert max(s["dag_run"] for s in samples[len(samples) // 2 :]) <= 2 * runs_window + 5
    assert len(result["cleans"]) >= 3 and sum(c["rows"] for c in result["cleans"]) > 0
    # Each short run keeps 50 items (5 batches): what retention has not removed yet.
    assert max(s["stream_item"] for s in samples) <= 50 * (2 * runs_window + 5)
