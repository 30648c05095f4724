"""The fault matrix: every component of a deployment killed with ``kill -9`` at once — a
lost machine — at several points of the same work, then started again.

One api-server, scheduler, triggerer and Celery worker share PostgreSQL. At each point
all four die together (the worker with its pool), so no surviving peer can cover for
another: whatever was in flight (queued messages, running tries, leased triggers, a
stream mid-batch, reports on the wire) must be recovered from the database and the
broker alone. The same checks as the high-availability test then hold: every run
succeeds, no try ran twice, no event was lost, stored twice or reordered.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import Engine

from tailrace.testing import wait_for

from .conftest import Cluster
from .test_high_availability import Workload

WIDE = 300
EVENTS = 200
BATCHED = 100
COMPONENTS = {
    "api": ("api-server",),
    "scheduler": ("scheduler",),
    "triggerer": ("triggerer",),
    "worker": ("worker", "--concurrency", "2"),
}

# Where in the work the machine is lost: tasks just dispatched and the stream starting;
# a third of everything done; most of it done, the rest in flight.
POINTS: dict[str, Callable[[Workload], bool]] = {
    "early": lambda w: w.lines("work") >= 5,
    "mid": lambda w: w.lines("work") >= w.wide // 3 and w.lines("consume") >= 20,
    "late": lambda w: w.lines("work") >= w.wide * 2 // 3 and w.lines("consume") >= w.events // 2,
}


def _start_all(cluster: Cluster, generation: int) -> None:
    for name, command in COMPONENTS.items():
        cluster.start(f"{name}-{generation}", *command)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("db_backend", ["postgres"])
@pytest.mark.parametrize(
    ("point", "broker_url"),
    [("early", "redis"), ("mid", "rabbitmq"), ("late", "redis")],
    indirect=["broker_url"],
)
def test_kill_9_of_every_component_at_once_loses_nothing_and_runs_nothing_twice(
    point: str, cluster: Cluster, engine: Engine, dags_folder: Path, tmp_path: Path
) -> None:
    work = Workload(
        dags_folder, tmp_path / "executions.txt", wide=WIDE, events=EVENTS, batched=BATCHED
    )
    _start_all(cluster, 1)
    work.trigger(cluster)

    wait_for(lambda: POINTS[point](work), timeout=240)
    for name in COMPONENTS:
        cluster.kill(f"{name}-1")
    _start_all(cluster, 2)

    work.wait_until_finished(engine, cluster)
    work.check_exactly_once(engine)
