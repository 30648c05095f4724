"""Missed deadlines, from the scheduler's side (ADR 0037): each passed deadline is marked
missed and its callback handed on, in one transaction — a SyncCallback as a
``dag_callback`` row a worker runs, an AsyncCallback as a one-shot trigger the triggerer
runs. No user code here: the callable stays a path until a worker or the triggerer
imports it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection

from tailrace import metrics
from tailrace.sdk.execution import DeadlineCallbackTrigger
from tailrace.serialization import SerializedDag
from tailrace.store import dag_callbacks, deadlines
from tailrace.store.triggers import create_trigger

log = logging.getLogger(__name__)

_BATCH = 100


@dataclass(frozen=True)
class Handed:
    callbacks: int = 0  # dag_callback rows for workers
    triggers: int = 0  # triggers for the triggerer


def hand_on_missed(
    conn: Connection,
    now: datetime,
    dag_for_version: Callable[[int], SerializedDag],
    only_runs: Collection[int] | None,
) -> Handed:
    """Every deadline passed at ``now``: missed, its callback on its way."""
    callbacks = triggers = 0
    while True:
        rows = deadlines.take_missed(conn, now, only_runs, limit=_BATCH)
        for row in rows:
            alert = dag_for_version(row.dag_version_id).deadlines[row.alert_index]
            log.warning(
                "run %s of %s missed its deadline %s (%s): calling %s",
                row.run_id,
                row.dag_id,
                row.name or f"#{row.id}",
                row.deadline_time.isoformat(),
                alert.callback_path,
                extra={"dag_id": row.dag_id, "run_id": row.run_id},
            )
            metrics.get().deadlines_missed.labels(row.dag_id).inc()
            if alert.callback_kind == "sync":
                callback_id = dag_callbacks.record_deadline(conn, row.dag_run_id, now)
                deadlines.handed_to_worker(conn, row.id, callback_id)
                callbacks += 1
                continue
            trigger = DeadlineCallbackTrigger(
                alert.callback_path, alert.callback_kwargs, deadlines.context(row)
            )
            classpath, kwargs = trigger.serialize()
            trigger_id = create_trigger(
                conn,
                classpath=classpath,
                kwargs=kwargs,
                consumer=deadlines.DEADLINE_CONSUMER,
                max_pending_events=None,
                now=now,
            )
            deadlines.handed_to_triggerer(conn, row.id, trigger_id)
            triggers += 1
        if len(rows) < _BATCH:
            return Handed(callbacks, triggers)
