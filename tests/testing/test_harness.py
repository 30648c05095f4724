"""DagHarness.run reads a run's state after a step only when a run transition here may
have ended it, so it must still see a run ended by a writer it is not told about."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import Engine, update

from tailrace.db.models import DagRun
from tailrace.testing import DagHarness, wait_for

WriteDag = Callable[[str, str], Path]

SOURCE = """
import os, time
from tailrace import DAG
from tailrace.sdk.operators.python import PythonOperator

def held():
    # Runs until the test releases it.
    while not os.path.exists({release!r}):
        time.sleep(0.02)

with DAG("held"):
    PythonOperator(task_id="held", python_callable=held)
"""


def test_a_run_ended_by_an_unseen_writer_is_still_noticed(
    harness: DagHarness, write_dag: WriteDag, engine: Engine, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    write_dag("held.py", SOURCE.format(release=str(release)))
    harness.parse()
    pk = harness.trigger("held")

    def end_it_behind_the_state_machine() -> None:
        # As another process's raw SQL would: no run transition in this process.
        wait_for(lambda: harness.states(pk).get("held") == "running", timeout=30)
        with engine.begin() as conn:
            conn.execute(update(DagRun).where(DagRun.id == pk).values(state="failed"))
        release.touch()

    writer = threading.Thread(target=end_it_behind_the_state_machine)
    writer.start()
    summary = harness.run(pk, timeout=30)
    writer.join()
    assert summary["state"] == "failed"
