"""DAG file parsing: one 1,000-task file, and an idle folder parsed again and again.

    python -m benchmarks.bench_parsing file [--repeat 5] [--json]
    python -m benchmarks.bench_parsing idle [--repeat 5] [--files 50] [--json]

``file`` (issue: Airflow compatibility, "parsing a 1,000-task DAG file is no slower"):
importing, validating and serializing the file in this process; the same through a parser
child process; and a parse written to a fresh SQLite database (``parse_and_sync``).
``idle``: a folder of ``--files`` small DAG files: the first parse, then a parse with
nothing changed (the parse loop of a standalone at rest) and one after one file changed.
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path

from benchmarks._common import Rows, database, median, run_scenarios, workspace


def thousand_task_source(tasks: int = 1000) -> str:
    """One DAG: ``tasks`` operators in 10 layers, each task downstream of one of the layer
    above, half of them PythonOperators with templated arguments."""
    return f"""
from datetime import datetime, timedelta
from tailrace import DAG
from tailrace.sdk.operators.empty import EmptyOperator
from tailrace.sdk.operators.python import PythonOperator

def work(n, ds=None):
    return n

with DAG(
    "wide_{tasks}",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    default_args={{"retries": 2, "retry_delay": timedelta(minutes=1)}},
    tags=["bench"],
):
    layer = []
    for i in range({tasks}):
        if i % 2:
            t = EmptyOperator(task_id=f"t{{i}}")
        else:
            t = PythonOperator(task_id=f"t{{i}}", python_callable=work, op_args=[i],
                               op_kwargs={{"ds": "{{{{ ds }}}}"}})
        if i >= {tasks} // 10:
            layer[i - {tasks} // 10] >> t
        layer.append(t)
"""


def small_source(n: int) -> str:
    return f"""
from datetime import datetime
from tailrace import dag, task

@dag(schedule=None, start_date=datetime(2026, 1, 1))
def small_{n}():
    @task
    def one():
        return {n}
    one()

small_{n}()
"""


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000


def _sqlite(base: Path, i: int) -> AbstractContextManager[str]:
    folder = base / f"db{i}"
    folder.mkdir()
    return database(folder, None)


def file_scenario(args: argparse.Namespace) -> Rows:
    from tailrace.dag_processing import parse_and_sync, parse_in_subprocess
    from tailrace.dag_processing._parse import parse_file
    from tailrace.db import create_engine

    in_process, child, synced = [], [], []
    with workspace() as base:
        folder = base / "dags"
        folder.mkdir()
        source = thousand_task_source()
        for i in range(args.repeat):
            # A new file (and module name) each time, so each import is a real import.
            for old in folder.glob("*.py"):
                old.unlink()
            path = folder / f"wide_{i}_dag.py"
            path.write_text(source)
            start = time.perf_counter()
            parse_file(str(path.resolve()), 30.0)
            in_process.append(_ms(start))
            start = time.perf_counter()
            parse_in_subprocess(str(folder))
            child.append(_ms(start))
            with _sqlite(base, i) as url:
                engine = create_engine(url)
                start = time.perf_counter()
                parse_and_sync(engine, str(folder), datetime.now(UTC))
                synced.append(_ms(start))
                engine.dispose()
    name = "1,000-task file"
    return [
        {"scenario": f"{name}: import, validate, serialize", "median ms": median(in_process)},
        {"scenario": f"{name}: in a parser process", "median ms": median(child)},
        {"scenario": f"{name}: parse and write to SQLite", "median ms": median(synced)},
    ]


def idle_scenario(args: argparse.Namespace) -> Rows:
    from tailrace.dag_processing import DagFileProcessor
    from tailrace.db import create_engine

    first, idle, one_changed = [], [], []
    with workspace() as base:
        folder = base / "dags"
        folder.mkdir()
        for n in range(args.files):
            (folder / f"small_{n}_dag.py").write_text(small_source(n))
        for i in range(args.repeat):
            with _sqlite(base, i) as url:
                engine = create_engine(url)
                processor = DagFileProcessor(str(folder))
                for timings in (first, idle):
                    start = time.perf_counter()
                    processor.parse_and_sync(engine, datetime.now(UTC))
                    timings.append(_ms(start))
                (folder / "small_0_dag.py").write_text(small_source(0) + f"\n# edit {i}\n")
                start = time.perf_counter()
                processor.parse_and_sync(engine, datetime.now(UTC))
                one_changed.append(_ms(start))
                engine.dispose()
    return [
        {"scenario": f"{args.files} files: first parse", "median ms": median(first)},
        {"scenario": f"{args.files} files: nothing changed", "median ms": median(idle)},
        {"scenario": f"{args.files} files: one file changed", "median ms": median(one_changed)},
    ]


def options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--files", type=int, default=50, help="DAG files of the idle scenario")


SCENARIOS = {
    "file": ("Parsing a 1,000-task DAG file", file_scenario),
    "idle": ("Parsing an unchanged folder again", idle_scenario),
}


def main(argv: list[str] | None = None) -> int:
    return run_scenarios(argv, __doc__ or "", SCENARIOS, options)


if __name__ == "__main__":
    sys.exit(main())
