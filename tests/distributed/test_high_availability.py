"""Two schedulers, two triggerers, an api-server and two Celery workers share one
PostgreSQL database; one of each is killed with ``kill -9`` in the middle of the work.

Every task writes one line per execution (``kind key try``) to a shared file, appended in
one write: the proof that no try ran twice. Streams are read back from the database: the
proof that no event was lost or stored twice.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select

from tailrace.config import EXAMPLE_DAGS_FOLDER
from tailrace.db.models import DagRun, TaskInstance, XCom
from tailrace.testing import run_cli, wait_for

from ._workload import recorded, stream, workload_dags
from .conftest import Cluster

WIDE = 1000
EVENTS = 300
BATCHED = 200


class Workload:
    """The DAGs above (plus the bundled streaming example) and the checks that nothing
    ran twice and no event was lost, whatever happened to the components meanwhile."""

    def __init__(
        self, dags_folder: Path, record: Path, *, wide: int, events: int, batched: int
    ) -> None:
        self.record = record
        self.wide, self.events, self.batched = wide, events, batched
        record.touch()
        source = workload_dags(
            "ha",
            record,
            wide=wide,
            events=events,
            batched=batched,
            pause=0.03,
            work_seconds=0.02,
            retries=3,
        )
        (dags_folder / "ha.py").write_text(source)
        shutil.copy(EXAMPLE_DAGS_FOLDER / "example_streaming.py", dags_folder)
        self.dag_ids = ("ha_wide", "ha_stream", "example_streaming")

    def trigger(self, cluster: Cluster) -> None:
        for dag_id in self.dag_ids:
            triggered = run_cli(cluster.env, "dags", "trigger", dag_id)
            assert triggered.returncode == 0, triggered.stderr

    def lines(self, kind: str) -> int:
        return recorded(self.record, kind)

    def wait_until_a_third_done(self) -> None:
        """Mid-run: a third of the wide DAG done, the stream flowing, batches handled."""
        wait_for(
            lambda: self.lines("work") >= self.wide // 3 and self.lines("consume") >= 20,
            timeout=180,
        )

    def wait_until_finished(self, engine: Engine, cluster: Cluster) -> None:
        def finished() -> dict[str, str] | None:
            with engine.connect() as conn:
                states = dict(conn.execute(select(DagRun.dag_id, DagRun.state)).all())
            done = all(s in ("success", "failed") for s in states.values())
            return states if done and len(states) == len(self.dag_ids) else None

        try:
            states = wait_for(finished, timeout=360)
        except AssertionError:
            # What was still going, and what every component said: a hang is readable.
            with engine.connect() as conn:
                left = conn.execute(
                    select(TaskInstance.task_id, TaskInstance.state, func.count())
                    .where(TaskInstance.state.not_in(["success", "skipped"]))
                    .group_by(TaskInstance.task_id, TaskInstance.state)
                ).all()
            raise AssertionError(
                f"runs unfinished after 360s: {left}\n{cluster.output()}"
            ) from None
        assert states == dict.fromkeys(self.dag_ids, "success"), cluster.output()

    def check_exactly_once(self, engine: Engine) -> None:
        # No try ran twice: each (kind, key, try) appears once; a key ran again only as
        # a later try (a retry after its worker was killed).
        executions = Counter(tuple(line.split()) for line in self.record.read_text().splitlines())
        twice = [e for e, n in executions.items() if n > 1]
        assert twice == [], f"tries that ran twice: {twice[:10]}"
        with engine.connect() as conn:
            final_try = {
                (r.task_id, r.map_index): r.try_number
                for r in conn.execute(
                    select(TaskInstance.task_id, TaskInstance.map_index, TaskInstance.try_number)
                )
            }
            results = dict(
                conn.execute(
                    select(XCom.map_index, XCom.value).where(XCom.task_id == "consume")
                ).all()
            )
            instances = conn.scalar(
                select(func.count()).where(
                    TaskInstance.task_id == "work", TaskInstance.map_index >= 0
                )
            )
        assert instances == self.wide
        for kind, key, try_number in executions:
            task_id = "batches" if kind == "handle" else kind
            map_index = -1 if kind == "handle" else int(key)
            assert int(try_number) <= final_try[(task_id, map_index)], (kind, key, try_number)
        assert {int(key) for kind, key, _ in executions if kind == "work"} == set(range(self.wide))

        # No event lost or stored twice, in order: the direct stream, the iterate
        # consumers' results, the batch handler's stream, and the bundled example.
        assert stream(engine, "ha_stream", "produce") == [{"i": i} for i in range(self.events)]
        assert results == {i: str(i) for i in range(self.events)}
        assert stream(engine, "ha_stream", "batches") == [i * 10 for i in range(self.batched)]
        pages = [item["page"] for item in stream(engine, "example_streaming", "fetch_pages")]
        assert pages == list(range(20))
        with engine.connect() as conn:
            summaries = conn.scalars(
                select(XCom.value)
                .where(XCom.task_id == "summarise", XCom.key == "return_value")
                .order_by(XCom.map_index)
            ).all()
        assert [json.loads(s)["page"] for s in summaries] == list(range(20))


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("db_backend", ["postgres"])
def test_kill_9_of_a_scheduler_a_triggerer_and_a_worker_loses_nothing_and_runs_nothing_twice(
    cluster: Cluster, engine: Engine, dags_folder: Path, tmp_path: Path
) -> None:
    work = Workload(
        dags_folder, tmp_path / "executions.txt", wide=WIDE, events=EVENTS, batched=BATCHED
    )
    cluster.start("api", "api-server")
    for name in ("scheduler-a", "scheduler-b"):
        cluster.start(name, "scheduler")
    for name in ("triggerer-a", "triggerer-b"):
        cluster.start(name, "triggerer")
    for name in ("worker-a", "worker-b"):
        cluster.start(name, "worker", "--concurrency", "2")
    work.trigger(cluster)

    work.wait_until_a_third_done()
    for name in ("scheduler-a", "triggerer-a", "worker-a"):
        cluster.kill(name)

    work.wait_until_finished(engine, cluster)
    work.check_exactly_once(engine)
