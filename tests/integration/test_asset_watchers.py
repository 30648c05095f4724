"""Asset watchers: each event a watcher's trigger yields is an asset event (its payload the
event's extra) that starts the DAGs scheduled on the asset; watchers with the same trigger
share one trigger run; the triggerer runs them as any trigger."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from tailrace.assets import list_events
from tailrace.db.models import AssetWatcher, DagRun, ImportError_, Trigger
from tailrace.sdk import Asset
from tailrace.sdk import AssetWatcher as SdkAssetWatcher
from tailrace.sdk.triggers import TimeDeltaTrigger
from tailrace.testing import DagHarness, wait_for

WriteDag = Callable[[str, str], Path]

WATCHED = """
import asyncio
import json
from tailrace import Asset, AssetWatcher, dag, task
from tailrace.sdk.triggers import BaseEventTrigger, TriggerEvent

OUT = {out!r}


class Ticks(BaseEventTrigger):
    def __init__(self, count, source):
        super().__init__()
        self.count, self.source = count, source

    def serialize(self):
        return (f"{{type(self).__module__}}.Ticks", {{"count": self.count, "source": self.source}})

    async def run(self):
        start = 0 if self.checkpoint is None else self.checkpoint + 1
        for n in range(start, self.count):
            yield TriggerEvent({{"n": n, "source": self.source}}, checkpoint=n)
        await asyncio.Event().wait()  # a watcher watches until it is stopped


inbox = Asset("queue://orders", watchers=[AssetWatcher("orders", Ticks(5, "shop"))])
# The same trigger (class and arguments): both watchers share one trigger run.
audit = Asset("queue://audit", watchers=[AssetWatcher("audit", Ticks(5, "shop"))])


def consumer(dag_id, asset):
    @dag(dag_id=dag_id, schedule=asset, max_active_runs=1)
    def the_dag():
        @task
        def record(*, triggering_asset_events):
            with open(OUT, "a") as f:
                for events in triggering_asset_events.values():
                    for e in events:
                        f.write(json.dumps({{"dag": dag_id, "n": e.extra["n"]}}) + "\\n")

        record()

    return the_dag()


consumer("on_orders", inbox)
consumer("on_audit", audit)
"""


def recorded(out: Path) -> list[dict[str, Any]]:
    if not out.exists():
        return []
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_a_watcher_creates_runs_from_its_triggers_events(
    harness: DagHarness, write_dag: WriteDag, tmp_path: Path
) -> None:
    out = tmp_path / "seen.jsonl"
    write_dag("watched.py", WATCHED.format(out=str(out)))
    harness.parse()
    with harness.engine.connect() as conn:
        watchers = conn.execute(select(AssetWatcher.name, AssetWatcher.trigger_id)).all()
        triggers = conn.scalar(
            select(func.count()).select_from(Trigger).where(Trigger.consumer == "asset")
        )
    assert sorted(w.name for w in watchers) == ["audit", "orders"]
    assert triggers == 1 and len({w.trigger_id for w in watchers}) == 1

    def all_seen() -> bool:
        rows = recorded(out)
        return all(
            sorted(r["n"] for r in rows if r["dag"] == d) == [0, 1, 2, 3, 4]
            for d in ("on_orders", "on_audit")
        )

    harness.start()
    assert harness.scheduler.run_until(all_seen, timeout=60), recorded(out)
    with harness.engine.connect() as conn:
        events = list_events(conn, asset="queue://orders")
        runs = conn.execute(
            select(DagRun.run_type, DagRun.state).where(DagRun.dag_id == "on_orders")
        ).all()
    assert sorted(e["extra"]["n"] for e in events) == [0, 1, 2, 3, 4]
    assert all(e["extra"]["source"] == "shop" for e in events)
    assert {r.run_type for r in runs} == {"asset_triggered"}
    # Each event once: the consumers saw every n exactly once between them.
    assert sorted(r["n"] for r in recorded(out) if r["dag"] == "on_orders") == [0, 1, 2, 3, 4]


def test_a_watchers_events_tell_the_scheduler_of_asset_events_not_of_a_stream(
    harness: DagHarness, write_dag: WriteDag, tmp_path: Path
) -> None:
    write_dag("watched.py", WATCHED.format(out=str(tmp_path / "seen.jsonl")))
    harness.parse()
    harness.start()  # the triggerer runs the watcher; the scheduler takes no step

    def stored() -> int:
        with harness.engine.connect() as conn:
            return len(list_events(conn, asset="queue://orders"))

    # The notice follows the commit (the loop sends it once the write returns): gather
    # what the inbox holds until the asset notice is there.
    triggers: set[int] = set()

    def noticed() -> bool:
        collected = harness.scheduler.inbox.collect(0, wait=False)
        triggers.update(collected.triggers_with_events)
        return collected.asset_events

    wait_for(noticed, timeout=30)
    wait_for(lambda: stored() == 5, timeout=30)
    # A step that follows looks for DAGs to run on the assets, and at no trigger's
    # consumer (the watcher acknowledged its events as it wrote them).
    assert triggers == set()


def test_a_watcher_whose_dag_file_is_gone_stops(
    harness: DagHarness, write_dag: WriteDag, tmp_path: Path
) -> None:
    path = write_dag("watched.py", WATCHED.format(out=str(tmp_path / "seen.jsonl")))
    harness.parse()
    path.unlink()
    harness.parse()
    with harness.engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(AssetWatcher)) == 0
        open_triggers = conn.scalar(
            select(func.count())
            .select_from(Trigger)
            .where(Trigger.consumer == "asset", Trigger.completed.is_(False))
        )
    assert open_triggers == 0


def test_only_an_event_trigger_can_watch() -> None:
    with pytest.raises(TypeError, match="TimeDeltaTrigger is not a BaseEventTrigger"):
        Asset("x", watchers=[SdkAssetWatcher("w", TimeDeltaTrigger(1))])  # type: ignore[arg-type]


def test_a_watcher_with_unstorable_arguments_is_an_import_error(
    harness: DagHarness, write_dag: WriteDag
) -> None:
    write_dag(
        "bad_watcher.py",
        """
        from tailrace import Asset, AssetWatcher, dag
        from tailrace.sdk.triggers import BaseEventTrigger

        class Bad(BaseEventTrigger):
            def serialize(self):
                return ("bad_watcher.Bad", {"callback": print})

            async def run(self):
                yield 1

        @dag(schedule=Asset("a", watchers=[AssetWatcher("w", Bad())]))
        def watched_badly():
            pass

        watched_badly()
        """,
    )
    harness.parse()
    with harness.engine.connect() as conn:
        (error,) = conn.execute(select(ImportError_.message)).all()
    assert "Asset watcher 'w'" in error.message
    assert "callback" in error.message
