"""Two minutes of benchmarks/bench_soak: the log's tables stay bounded (no timing checked)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tailrace.scheduler._loop import PRUNE_INTERVAL_SECONDS

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.exclusive]

RETENTION, CLEAN_EVERY, RUNS_PER_HOUR = 20, 30, 1000
WINDOW = 2000  # the endless sink's max_pending_events (benchmarks/bench_soak.py)


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
    assert produced > 5 * most_events, (produced, most_events)
    # With it, the table holds the unacknowledged window (max_pending_events) and what was
    # acknowledged since the last prune (every PRUNE_INTERVAL_SECONDS, after a pass; a
    # db clean holds the write lock meanwhile). A sample lands anywhere in that saw-tooth
    # (2,500 to 12,000 rows at 24,000 events/s here), so the bound is in the stream's own
    # rate: what two seconds of it add, at the fastest it was sampled.
    peak_rate = max(s["events_per_s"] for s in samples)
    assert most_events <= WINDOW + 2 * peak_rate, (most_events, peak_rate)
    # Bounded, not growing: a table that grows lifts even the second half's smallest
    # sample above the first half's largest and above the saw-tooth's top (one prune
    # interval's events over the window).
    half = len(samples) // 2
    early = max(s["trigger_event"] for s in samples[:half])
    late = min(s["trigger_event"] for s in samples[half:])
    assert late <= max(early, WINDOW + peak_rate * PRUNE_INTERVAL_SECONDS), (early, late)
    # Runs and their streams go once past retention and the next db clean: at most what
    # starts in a retention period plus a clean interval, with room for slow machines.
    runs_window = RUNS_PER_HOUR * (RETENTION + CLEAN_EVERY) / 3600
    assert max(s["dag_run"] for s in samples[len(samples) // 2 :]) <= 2 * runs_window + 5
    assert len(result["cleans"]) >= 3 and sum(c["rows"] for c in result["cleans"]) > 0
    # Each short run keeps 50 items (5 batches): what retention has not removed yet.
    assert max(s["stream_item"] for s in samples) <= 50 * (2 * runs_window + 5)
