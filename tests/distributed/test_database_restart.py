"""PostgreSQL restarts in the middle of a run: every component reconnects and carries on.

The server is the test's own (a real PostgreSQL the test may stop), so restarting it
disturbs no other test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tailrace.db import create_engine

from .conftest import PrivatePostgres, open_cluster
from .test_high_availability import Workload


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("broker_url", ["redis"], indirect=True)
def test_components_reconnect_when_postgresql_restarts_and_lose_nothing(
    private_postgres: PrivatePostgres, broker_url: str, dags_folder: Path, tmp_path: Path
) -> None:
    work = Workload(dags_folder, tmp_path / "executions.txt", wide=300, events=120, batched=60)
    engine = create_engine(private_postgres.url)
    try:
        with open_cluster(private_postgres.url, broker_url, dags_folder, tmp_path) as cluster:
            cluster.start("api", "api-server")
            cluster.start("scheduler", "scheduler")
            cluster.start("triggerer", "triggerer")
            cluster.start("worker", "worker", "--concurrency", "2")
            work.trigger(cluster)

            work.wait_until_a_third_done()
            engine.dispose()
            private_postgres.restart()

            work.wait_until_finished(engine, cluster)
            work.check_exactly_once(engine)
            # Nobody gave up: every component is still running.
            assert {name: proc.poll() for name, proc in cluster.procs.items()} == dict.fromkeys(
                cluster.procs
            )
            # The restart is a warning line a retry, not a traceback.
            for name in ("scheduler", "triggerer"):
                output = (cluster.logs / f"{name}.log").read_text()
                assert "Traceback" not in output, f"{name}:\n{output[-4000:]}"
    finally:
        # Its connections go with it, failed or not (a leaked one warns in the next test).
        engine.dispose()
