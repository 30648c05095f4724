"""Changes a person asks for, from the CLI or the API.

Each writes in one short transaction, then wakes the components that must react (the
scheduler, and the triggerers when triggers were cancelled), so the change takes effect
now rather than at the next safety-net poll.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, select, update

from tailrace.clock import utcnow
from tailrace.dagrun import clear_task_instances, find_run, mark_task_instances, trigger_dag_run
from tailrace.db.models import Asset as AssetRow
from tailrace.db.models import Dag
from tailrace.errors import AssetEventTooLargeError, AssetNotFoundError, DagNotFoundError
from tailrace.notify import Wakeups
from tailrace.serialization import dumps
from tailrace.store.assets import NewAssetEvent, find_asset, record_events

if TYPE_CHECKING:
    from tailrace.backfills import BackfillRequest
    from tailrace.store.backfills import BackfillRow


def trigger_run(
    engine: Engine,
    wakeups: Wakeups,
    dag_id: str,
    conf: dict[str, Any],
    *,
    run_id: str | None = None,
    max_conf_bytes: int | None = None,
    then: Callable[[Connection, int, str], object] | None = None,
) -> tuple[int, str]:
    """Create a manual run and wake the scheduler; returns (primary key, run id).
    ``then(conn, pk, run_id)`` runs in the creating transaction (see `trigger_dag_run`)."""
    created = trigger_dag_run(
        engine, dag_id, conf, run_id=run_id, max_conf_bytes=max_conf_bytes, then=then
    )
    wakeups.send("scheduler")
    return created


def replay_run(
    engine: Engine,
    wakeups: Wakeups,
    dag_id: str,
    source_run_id: str,
    task_id: str,
    *,
    run_id: str | None = None,
) -> tuple[int, str]:
    """A new run of ``task_id`` (and what follows it) over ``source_run_id``'s streams."""
    from tailrace.replay import replay_run as create

    created = create(engine, dag_id, source_run_id, task_id, run_id=run_id)
    wakeups.send("scheduler")
    return created


def set_paused(engine: Engine, wakeups: Wakeups, dag_id: str, paused: bool) -> None:
    with engine.begin() as conn:
        found = conn.execute(update(Dag).where(Dag.dag_id == dag_id).values(is_paused=paused))
    if found.rowcount == 0:
        raise DagNotFoundError(dag_id)
    wakeups.send("scheduler")
    if paused:
        wakeups.send("triggerer")  # its queue streams end (BaseTrigger.stop_gracefully)


def _change_run(
    engine: Engine,
    wakeups: Wakeups,
    dag_id: str,
    run_id: str | None,
    apply: Callable[[Connection, int], int],
) -> int:
    with engine.begin() as conn:
        changed = apply(conn, find_run(conn, dag_id, run_id))
    wakeups.send("scheduler")
    wakeups.send("triggerer")
    return changed


def clear(
    engine: Engine,
    wakeups: Wakeups,
    dag_id: str,
    run_id: str | None,
    task_ids: Collection[str] | None = None,
    *,
    only_failed: bool = False,
) -> int:
    """Run task instances of a run (default: the latest) again; returns how many."""
    return _change_run(
        engine,
        wakeups,
        dag_id,
        run_id,
        lambda conn, pk: clear_task_instances(
            conn, pk, task_ids, utcnow(), only_failed=only_failed
        ),
    )


def mark(
    engine: Engine,
    wakeups: Wakeups,
    dag_id: str,
    run_id: str | None,
    task_ids: Collection[str],
    state: str,
) -> int:
    """Set task instances of a run (default: the latest) to ``state``; returns how many."""
    return _change_run(
        engine,
        wakeups,
        dag_id,
        run_id,
        lambda conn, pk: mark_task_instances(conn, pk, task_ids, state, utcnow()),
    )


def create_asset_event(
    engine: Engine,
    wakeups: Wakeups,
    asset: str,
    extra: dict[str, Any],
    *,
    dedup_key: str | None = None,
    max_extra_bytes: int | None = None,
) -> int | None:
    """An event of an existing asset (by name or URI) from outside, queued for the DAGs
    scheduled on it; returns its id (None if ``dedup_key`` was recorded before)."""
    if max_extra_bytes is not None:
        size = len(dumps(extra).encode())
        if size > max_extra_bytes:
            raise AssetEventTooLargeError(asset, size, max_extra_bytes)
    with engine.begin() as conn:
        asset_id = find_asset(conn, asset)
        if asset_id is None:
            raise AssetNotFoundError(asset)
        name = conn.scalar(select(AssetRow.name).where(AssetRow.id == asset_id))
        assert name is not None
        written = record_events(
            conn, [NewAssetEvent(name=name, extra=dict(extra), dedup_key=dedup_key)], utcnow()
        )
    wakeups.send("scheduler")
    return written[0][0] if written else None


def create_backfill(
    engine: Engine,
    wakeups: Wakeups,
    request: BackfillRequest,
    *,
    triggering_user_name: str | None = None,
) -> BackfillRow:
    """A backfill and its queued runs; the scheduler is woken to start them."""
    from tailrace import backfills

    row = backfills.create_backfill(
        engine, request, utcnow(), triggering_user_name=triggering_user_name
    )
    wakeups.send("scheduler")
    return row


def change_backfill(engine: Engine, wakeups: Wakeups, backfill_id: int, change: str) -> BackfillRow:
    """``pause``, ``unpause`` or ``cancel`` a backfill that is not complete."""
    from tailrace import backfills

    now = utcnow()
    if change == "cancel":
        row = backfills.cancel(engine, backfill_id, now)
    else:
        row = backfills.set_paused(engine, backfill_id, change == "pause", now)
    wakeups.send("scheduler")
    return row
