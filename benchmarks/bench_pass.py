"""One scheduler pass over a long chain's run (or a wide one), apart from a step's rest.

    python -m benchmarks.bench_pass [--repeat 3] [--json] [--passes 300] [--done 100] \
        [--changed 2] [--dag chain_200|wide_1000] [--database-url postgresql://...]

A chain of 200 no-op tasks (`bench_scheduler`'s ``chain_200``; ``--dag wide_1000``: its
1,000 independent ones) is triggered and its first step taken; then its first ``--done``
instances are marked successful, so (in the chain) the next is ready and the rest wait.
Before each pass ``--changed`` instances (the last done ones) are written again, as a
hop writes its finished and queued instances. The pass's two halves are timed
``--passes`` times each in a fresh transaction: *load* (the run row and its instances,
`RunPass._load`) and *plan* (`plan_run` over the loaded rows). Each run reports the
median and the minimum in microseconds; the table gives the medians of those over
``--repeat`` runs. A chained task's hop pays one such pass; this measures it without
the workers, the executor's threads and the step's other statements, so a before and
after of planner or loading changes is visible on a loaded machine (read the minimum
there). Compare trees with ``PYTHONPATH=<tree>/src``.

Each run is timed twice, interleaved: with the run's instances kept between passes (ADR
0046 on SQLite, 0052 on PostgreSQL) and with nothing kept (every pass reads the run
whole, as PostgreSQL did before ADR 0052): the baseline in the same invocation.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks._common import database, emit, harness, median, parser, workspace
from benchmarks.bench_scheduler import DAGS


def run_once(
    base: Path,
    server_url: str | None,
    dag_id: str,
    passes: int,
    done: int,
    changed: int,
    *,
    keep: bool,
) -> dict[str, float]:
    from sqlalchemy import select, update

    from tailrace.db.models import TaskInstance
    from tailrace.scheduler._pass import KeptRuns
    from tailrace.scheduler._planner import plan_run

    with database(base, server_url) as url:
        h = harness(base, url, DAGS)
        with h:
            h.parse()
            h.scheduler.start()  # the default pool, as a scheduler makes it
            pk = h.trigger(dag_id)
            h.scheduler.step(0)  # the run's instances exist
            with h.engine.begin() as conn:
                ids = list(
                    conn.scalars(
                        select(TaskInstance.id)
                        .where(TaskInstance.dag_run_id == pk)
                        .order_by(TaskInstance.id)
                    )
                )
                conn.execute(
                    update(TaskInstance).where(TaskInstance.dag_run_id == pk).values(state=None)
                )
                conn.execute(
                    update(TaskInstance)
                    .where(TaskInstance.id.in_(ids[:done]))
                    .values(state="success")
                )
            run_pass = h.scheduler._pass
            if not keep:
                run_pass.kept = KeptRuns(limit=0)  # every pass reads the run whole
            loads, plans = [], []
            ready: list[str] = []
            hop = ids[max(0, done - changed) : done]
            for _ in range(passes):
                if hop:
                    # What a hop writes between passes: the rows rewritten as they are.
                    with h.engine.begin() as conn:
                        conn.execute(
                            update(TaskInstance)
                            .where(TaskInstance.id.in_(hop))
                            .values(state="success")
                        )
                with h.engine.connect() as conn:
                    now = datetime.now(UTC)
                    began = time.perf_counter()
                    runs, tis, hidden, _ = run_pass._load(conn, [pk], None)
                    loaded = time.perf_counter()
                    dag = run_pass.dag(conn, runs[pk].dag_version_id)
                    planned = time.perf_counter()
                    plan = plan_run(dag, tis[pk], now, hidden[pk], None)
                    ended = time.perf_counter()
                    conn.rollback()
                loads.append((loaded - began) * 1e6)
                plans.append((ended - planned) * 1e6)
                ready = [r.task_id for r in plan.ready]
        h.engine.dispose()
    expected = [f"t{done}"] if dag_id == "chain_200" else [f"t{i}" for i in range(done, 1000)]
    assert sorted(ready) == sorted(expected), ready
    return {
        "load_median": median(loads),
        "load_min": min(loads),
        "plan_median": median(plans),
        "plan_min": min(plans),
    }


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--passes", type=int, default=300, help="passes timed per run")
    p.add_argument("--done", type=int, default=100, help="chain instances already done")
    p.add_argument(
        "--changed", type=int, default=2, help="instances written between passes (a hop: 2)"
    )
    p.add_argument("--dag", choices=("chain_200", "wide_1000"), default="chain_200")
    args = p.parse_args(argv)
    runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for _ in range(args.repeat):
        for keep in (True, False):
            with workspace() as base:
                runs[keep].append(
                    run_once(
                        base,
                        args.database_url,
                        args.dag,
                        args.passes,
                        args.done,
                        args.changed,
                        keep=keep,
                    )
                )
    backend = "postgresql" if args.database_url else "sqlite"
    rows = []
    for keep, label in ((True, "kept"), (False, "read whole")):
        row: dict[str, Any] = {
            "scenario": f"{args.dag}, {args.done} done, {args.changed} changed ({backend})",
            "instances": label,
            "runs": len(runs[keep]),
        }
        for key, column in (
            ("load_median", "load median µs"),
            ("load_min", "load min µs"),
            ("plan_median", "plan median µs"),
            ("plan_min", "plan min µs"),
        ):
            row[column] = median([r[key] for r in runs[keep]])
        rows.append(row)
    emit("One scheduler pass over a chain's run (load, plan)", rows, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
