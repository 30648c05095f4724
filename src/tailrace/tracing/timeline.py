"""The run timeline: each task instance's state changes with their times, kept by a
transition hook (ADR 0011) with the batches of trigger events handed to it, and read back
as a Gantt's segments — queued, running and deferred stints of each try, trigger runs,
event batches — for the run page. Independent of tracing: it is on whether or not spans
are exported."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Connection,
    Integer,
    String,
    bindparam,
    delete,
    func,
    insert,
    select,
    type_coerce,
)

from tailrace.db.models import TaskInstance, TaskTimeline, Trigger, TriggerEvent
from tailrace.db.types import UTCDateTime

__all__ = [
    "RECORDED_KINDS",
    "Handed",
    "events_handed",
    "install_timeline",
    "record_transitions",
    "run_timeline",
    "trim_timelines",
]

# A streaming task resumes for every batch it is handed (five rows a batch: events,
# resume, queue, start, defer): its newest rows are kept, so an endless stream's timeline
# stays bounded (ADR 0023's live pruning, applied to the timeline).
TIMELINE_KEEP = 1000

# The transitions a Gantt needs; the unrun ones (skipped by trigger rules, say — there may
# be millions of mapped instances) have no segments and are not kept.
RECORDED_KINDS = frozenset(
    {"queue", "start", "defer", "resume", "finish", "orphan", "clear", "mark"}
)

_RECORD = insert(TaskTimeline).from_select(
    ["task_instance_id", "dag_run_id", "try_number", "kind", "state", "at"],
    select(
        TaskInstance.id,
        TaskInstance.dag_run_id,
        func.coalesce(type_coerce(bindparam("b_try"), Integer), TaskInstance.try_number),
        type_coerce(bindparam("b_kind"), String),
        type_coerce(bindparam("b_state"), String),
        type_coerce(bindparam("b_at"), UTCDateTime),
    ).where(TaskInstance.id == bindparam("b_id")),
)


def record_transitions(conn: Connection, transitions: Sequence[Any]) -> None:
    """The transition hook: one statement for the batch, in its transaction."""
    rows = [
        {
            "b_id": t.ti_id,
            "b_try": t.try_number,
            "b_kind": t.kind,
            "b_state": t.state,
            "b_at": t.at,
        }
        for t in transitions
        if t.kind in RECORDED_KINDS
    ]
    if rows:
        conn.execute(_RECORD, rows)


_installed = False
_lock = threading.Lock()


def install_timeline() -> None:
    """Register the timeline's transition hook once per process (schedulers and
    api-servers: where task-instance state changes)."""
    global _installed
    from tailrace import transitions

    with _lock:
        if not _installed:
            transitions.register_hook(record_transitions)
            _installed = True


@dataclass(frozen=True)
class Handed:
    """A batch of trigger events handed to its consumer."""

    trigger_run_id: str
    first: int
    last: int
    # When its first event was written, and when its trigger was created.
    arrived_at: datetime
    trigger_created_at: datetime | None


def events_handed(
    conn: Connection,
    *,
    ti_id: int,
    trigger_id: int,
    first: int,
    last: int,
    consumer: str,
    now: datetime,
) -> Handed:
    """Record that events ``first``..``last`` of the trigger went to instance ``ti_id``."""
    head = conn.execute(
        select(TriggerEvent.trigger_run_id, TriggerEvent.created_at, Trigger.created_at)
        .join(Trigger, Trigger.id == TriggerEvent.trigger_id)
        .where(TriggerEvent.trigger_id == trigger_id, TriggerEvent.sequence_index == first)
    ).first()
    handed = Handed(
        trigger_run_id=head[0] if head is not None else "",
        first=first,
        last=last,
        arrived_at=head[1] if head is not None else now,
        trigger_created_at=head[2] if head is not None else None,
    )
    conn.execute(
        insert(TaskTimeline).from_select(
            ["task_instance_id", "dag_run_id", "try_number", "kind", "at", "detail"],
            select(
                TaskInstance.id,
                TaskInstance.dag_run_id,
                TaskInstance.try_number,
                type_coerce("events", String),
                type_coerce(now, UTCDateTime),
                type_coerce(
                    {
                        "trigger_id": trigger_id,
                        "trigger_run_id": handed.trigger_run_id,
                        "first": first,
                        "last": last,
                        "consumer": consumer,
                        "arrived_at": handed.arrived_at.isoformat(),
                        "trigger_created_at": handed.trigger_created_at.isoformat()
                        if handed.trigger_created_at
                        else None,
                    },
                    TaskTimeline.__table__.c.detail.type,
                ),
            ).where(TaskInstance.id == ti_id),
        )
    )
    return handed


def trim_timelines(
    conn: Connection, trigger_ids: Collection[int], keep: int = TIMELINE_KEEP
) -> int:
    """Keep the newest ``keep`` rows of each instance these triggers serve; how many went."""
    deleted = 0
    served = select(TaskInstance.id).where(TaskInstance.trigger_id.in_(sorted(trigger_ids)))
    for ti_id in conn.scalars(served).all():
        cutoff = conn.scalar(
            select(TaskTimeline.id)
            .where(TaskTimeline.task_instance_id == ti_id)
            .order_by(TaskTimeline.id.desc())
            .offset(keep)
            .limit(1)
        )
        if cutoff is not None:
            deleted += conn.execute(
                delete(TaskTimeline).where(
                    TaskTimeline.task_instance_id == ti_id, TaskTimeline.id <= cutoff
                )
            ).rowcount
    return deleted


# -- reading it back ----------------------------------------------------------------------

# What a transition opens: the segment that lasts until the next one.
_OPENS = {"queue": "queued", "start": "running", "defer": "deferred"}


def _segments(entries: list[Any], now: datetime) -> list[dict[str, Any]]:
    """Per try: its segments in order, its state at the end."""
    tries: dict[int, dict[str, Any]] = {}
    open_kind: str | None = None
    open_at: datetime | None = None
    open_try = 0

    def close(at: datetime) -> None:
        nonlocal open_kind
        if open_kind is not None and open_at is not None:
            tries[open_try]["segments"].append(
                {"kind": open_kind, "start": open_at, "end": at, "open": False}
            )
        open_kind = None

    for e in entries:
        if e.kind == "events":
            continue
        if e.kind in ("clear",):
            close(e.at)
            continue
        try_ = tries.setdefault(
            e.try_number, {"try_number": e.try_number, "state": None, "segments": []}
        )
        close(e.at)
        try_["state"] = e.state
        if e.kind in _OPENS:
            open_kind, open_at, open_try = _OPENS[e.kind], e.at, e.try_number
    if open_kind is not None and open_at is not None:
        tries[open_try]["segments"].append(
            {"kind": open_kind, "start": open_at, "end": now, "open": True}
        )
    return [tries[n] for n in sorted(tries)]


def _parse(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def run_timeline(conn: Connection, dag_run_id: int, now: datetime) -> list[dict[str, Any]]:
    """Each task instance of the run that did something: its tries' segments, the batches
    of trigger events it was handed and the trigger runs they came from."""
    entries: dict[int, list[Any]] = defaultdict(list)
    for e in conn.execute(
        select(TaskTimeline)
        .where(TaskTimeline.dag_run_id == dag_run_id)
        .order_by(TaskTimeline.at, TaskTimeline.id)
    ):
        entries[e.task_instance_id].append(e)
    if not entries:
        return []
    names = {
        r.id: r
        for r in conn.execute(
            select(TaskInstance.id, TaskInstance.task_id, TaskInstance.map_index).where(
                TaskInstance.id.in_(list(entries))
            )
        )
    }
    out = []
    for ti_id, rows in entries.items():
        ti = names.get(ti_id)
        if ti is None:
            continue
        batches = [
            {
                "try_number": e.try_number,
                "trigger_run_id": e.detail["trigger_run_id"],
                "first": e.detail["first"],
                "last": e.detail["last"],
                "count": e.detail["last"] - e.detail["first"] + 1,
                "arrived_at": _parse(e.detail["arrived_at"]),
                "handed_at": e.at,
            }
            for e in rows
            if e.kind == "events" and e.detail
        ]
        runs: dict[str, dict[str, Any]] = {}
        for e in rows:
            if e.kind != "events" or not e.detail:
                continue
            began = _parse(e.detail.get("trigger_created_at")) or _parse(e.detail["arrived_at"])
            last = _parse(e.detail["arrived_at"])
            run = runs.setdefault(
                e.detail["trigger_run_id"],
                {"trigger_run_id": e.detail["trigger_run_id"], "start": began, "end": last},
            )
            run["end"] = max(x for x in (run["end"], last) if x is not None)
        out.append(
            {
                "task_id": ti.task_id,
                "map_index": ti.map_index,
                "tries": _segments(rows, now),
                "event_batches": batches,
                "trigger_runs": list(runs.values()),
            }
        )
    out.sort(key=lambda t: (*_first(t), t["task_id"], t["map_index"]))
    return out


def _first(task: dict[str, Any]) -> tuple[bool, datetime | None]:
    starts = [s["start"] for t in task["tries"] for s in t["segments"]]
    return (not starts, min(starts) if starts else None)
