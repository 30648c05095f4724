"""Wall time of the time-skipping harness for DAGs that wait for days.

    python -m benchmarks.bench_timeskip day    [--repeat 5]

``day`` runs, in one harness (one migrated SQLite database, the DAG file parsed), a DAG
whose sensor waits 24 hours (``TimeDeltaSensorAsync``) and whose next task fails twice
with retries ten minutes apart, then a week of a daily cron DAG (eight runs). Each row is
the real time one call took, from ``trigger`` to the run's end (or the week's), medians
over ``--repeat`` fresh harnesses; the first row is the harness's own set-up (database
copy, triggerer start, parse), paid once per test. Virtual time and the clock's jumps
are shown beside. Add --json for JSON. Wall times include waiting for a CPU: give the
load average with the figures.
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from benchmarks._common import median, run_scenarios, workspace

DAGS = """
from datetime import UTC, datetime, timedelta

from tailrace import DAG, task
from tailrace.sdk.sensors import TimeDeltaSensorAsync

with DAG("day_long", schedule=None):
    wait = TimeDeltaSensorAsync(task_id="wait_a_day", delta=timedelta(hours=24))

    @task(retries=3, retry_delay=timedelta(minutes=10))
    def flaky(ti=None):
        if ti.try_number < 3:
            raise RuntimeError(f"try {ti.try_number} fails")
        return ti.try_number

    wait >> flaky()

with DAG(
    "daily", schedule="0 6 * * *", start_date=datetime(2026, 3, 1, tzinfo=UTC), catchup=False
):
    @task
    def stamp(ds=None):
        return ds

    stamp()
"""
START = datetime(2026, 3, 2, tzinfo=UTC)
TARGET_S = 1.0


def day(args: argparse.Namespace) -> list[dict[str, Any]]:
    from tailrace.testing import TimeSkippingHarness

    setup, runs, weeks = [], [], []
    virtual: dict[str, timedelta] = {}
    jumps: dict[str, int] = {}
    for _ in range(args.repeat):
        with workspace() as base:
            (base / "dags").mkdir()
            (base / "dags" / "waiting.py").write_text(DAGS)
            began = time.perf_counter()
            with TimeSkippingHarness(base / "dags", start=START, work_dir=base) as env:
                setup.append(time.perf_counter() - began)
                began, before = time.perf_counter(), env.jumps
                run = env.trigger_and_run("day_long")
                runs.append(time.perf_counter() - began)
                if env.summary(run)["state"] != "success":
                    raise RuntimeError(f"day_long did not succeed: {env.summary(run)}")
                virtual["day"], jumps["day"] = env.now - START, env.jumps - before
                began, at, before = time.perf_counter(), env.now, env.jumps
                env.advance(timedelta(days=7))
                weeks.append(time.perf_counter() - began)
                if len(env.runs("daily")) < 7:
                    raise RuntimeError(f"only {len(env.runs('daily'))} daily runs in a week")
                virtual["week"], jumps["week"] = env.now - at, env.jumps - before
    load = os.getloadavg()[0]
    return [
        _row("set-up (database, parse)", setup, None, None, None, load),
        _row(
            "24 h sensor + 2 retries",
            runs,
            virtual["day"],
            jumps["day"],
            TARGET_S,
            load,
        ),
        _row("a week of daily runs", weeks, virtual["week"], jumps["week"], TARGET_S, load),
    ]


def _row(
    name: str,
    samples: list[float],
    virtual: timedelta | None,
    jumps: int | None,
    target: float | None,
    load: float,
) -> dict[str, Any]:
    return {
        "scenario": name,
        "wall_ms": median(samples) * 1000,
        "virtual": "" if virtual is None else _span(virtual),
        "jumps": "" if jumps is None else jumps,
        "target_ms": "" if target is None else f"< {target * 1000:,.0f}",
        "load": f"{load:.1f}",
    }


def _span(span: timedelta) -> str:
    hours, rest = divmod(int(span.total_seconds()), 3600)
    return f"{hours} h {rest // 60:02d} min"


def options(p: argparse.ArgumentParser) -> None:
    p.set_defaults(repeat=5)


SCENARIOS = {
    "day": ("Time-skipping harness: a day-long DAG and a week of cron runs", day),
}


def main(argv: list[str] | None = None) -> int:
    return run_scenarios(argv, __doc__ or "", SCENARIOS, options)


if __name__ == "__main__":
    raise SystemExit(main())
