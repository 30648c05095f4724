"""Pools, as in Airflow: a named number of slots that the task instances using the pool
take while queued or running (and deferred, with ``include_deferred``); a task takes
``pool_slots`` of them. ``default_pool`` always exists: the scheduler creates it with
``default_pool_task_slot_count`` slots, and it can be resized but not deleted."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlalchemy import (
    Boolean,
    CompoundSelect,
    Connection,
    Integer,
    String,
    delete,
    func,
    insert,
    literal,
    null,
    select,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from tailrace.db.models import Pool, TaskInstance
from tailrace.errors import TailraceError
from tailrace.state import TaskInstanceState as TIS

DEFAULT_POOL = "default_pool"


class PoolError(TailraceError, ValueError):
    """A pool that cannot be created, changed or deleted as asked."""


class PoolNotFoundError(PoolError, LookupError):
    def __init__(self, name: str) -> None:
        super().__init__(f"no pool {name!r}; see `tailrace pools list`")
        self.name = name


@dataclass(frozen=True)
class PoolUsage:
    name: str
    slots: int
    description: str | None
    include_deferred: bool
    running: int
    queued: int
    deferred: int

    @property
    def occupied(self) -> int:
        return self.running + self.queued + (self.deferred if self.include_deferred else 0)

    @property
    def open(self) -> int:
        return self.slots - self.occupied

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "slots": self.slots,
            "description": self.description,
            "include_deferred": self.include_deferred,
            "running_slots": self.running,
            "queued_slots": self.queued,
            "deferred_slots": self.deferred,
            "occupied_slots": self.occupied,
            "open_slots": self.open,
        }


def ensure_default_pool(conn: Connection, slots: int) -> None:
    """Create ``default_pool`` with ``slots`` slots unless it exists (a resized one keeps
    its size, as in Airflow)."""
    if conn.scalar(select(Pool.name).where(Pool.name == DEFAULT_POOL)) is not None:
        return
    # Several schedulers may start at once: the first insert wins, the others do nothing.
    make = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    conn.execute(
        make(Pool)
        .values(name=DEFAULT_POOL, slots=slots, description="Default pool", include_deferred=False)
        .on_conflict_do_nothing(index_elements=["name"])
    )


_TAKING_SLOTS = (
    select(
        TaskInstance.pool,
        TaskInstance.state,
        func.count(),
        func.sum(TaskInstance.pool_slots),
    )
    .where(TaskInstance.state.in_([TIS.QUEUED, TIS.RUNNING, TIS.DEFERRED]))
    .group_by(TaskInstance.pool, TaskInstance.state)
)
_POOLS = select(Pool.name, Pool.slots, Pool.description, Pool.include_deferred).order_by(Pool.name)


@dataclass(frozen=True)
class Taken:
    """Instances queued or running, and the pool slots taken, by (pool, state)."""

    instances: dict[tuple[str, str], int]
    slots: dict[tuple[str, str], int]

    @property
    def busy(self) -> int:
        """Instances queued or running (what the scheduler's parallelism counts)."""
        return sum(n for (_, state), n in self.instances.items() if state != TIS.DEFERRED)

    @property
    def unstarted(self) -> int:
        """Tries queued that no worker has started yet: the executor's backlog."""
        return sum(n for (_, state), n in self.instances.items() if state == TIS.QUEUED)


def _taken(conn: Connection) -> Taken:
    return _count_taken(conn.execute(_TAKING_SLOTS))


def _count_taken(rows: Iterable[Any]) -> Taken:
    """``Taken`` from rows of (pool, state, instances, slots)."""
    instances: dict[tuple[str, str], int] = {}
    slots: dict[tuple[str, str], int] = {}
    for pool, state, count, total in rows:
        instances[(pool, str(state))] = int(count)
        slots[(pool, str(state))] = int(total or 0)
    return Taken(instances, slots)


def _usage(pool_rows: Iterable[Any], taken: Taken) -> list[PoolUsage]:
    """Each pool of ``pool_rows`` (name, slots, description, include_deferred)."""
    return [
        PoolUsage(
            name=name,
            slots=slots,
            description=description,
            include_deferred=include_deferred,
            running=taken.slots.get((name, TIS.RUNNING), 0),
            queued=taken.slots.get((name, TIS.QUEUED), 0),
            deferred=taken.slots.get((name, TIS.DEFERRED), 0),
        )
        for name, slots, description, include_deferred in pool_rows
    ]


def usage(conn: Connection) -> list[PoolUsage]:
    """Every pool with the slots its task instances take now, by name."""
    taken = _taken(conn)
    return _usage(conn.execute(_POOLS), taken)


# Dispatch's room in one statement (it runs every scheduler step): the pools' rows and,
# after them, what the instances take by pool and state; ``kind`` tells which is which.
_ROOM: CompoundSelect[Any] = union_all(
    select(
        literal("pool").label("kind"),
        Pool.name,
        Pool.slots,
        Pool.include_deferred,
        null().cast(String).label("state"),
        literal(0).label("instances"),
        literal(0).label("taken"),
    ),
    select(
        literal("taken"),
        TaskInstance.pool,
        null().cast(Integer),
        null().cast(Boolean),
        TaskInstance.state,
        func.count(),
        func.sum(TaskInstance.pool_slots),
    )
    .where(TaskInstance.state.in_([TIS.QUEUED, TIS.RUNNING, TIS.DEFERRED]))
    .group_by(TaskInstance.pool, TaskInstance.state),
)


class Room(NamedTuple):
    """Dispatch's view of the slots: instances queued or running in all pools, the tries
    among them no worker has started yet, and the open slots of each pool."""

    busy: int
    unstarted: int
    open: dict[str, int]


def room(conn: Connection) -> Room:
    """For dispatch, in one statement: see ``Room``."""
    pool_rows, taken_rows = [], []
    for kind, name, slots, include_deferred, state, count, total in conn.execute(_ROOM):
        if kind == "pool":
            pool_rows.append((name, slots, None, include_deferred))
        else:
            taken_rows.append((name, state, count, total))
    taken = _count_taken(taken_rows)
    return Room(taken.busy, taken.unstarted, {p.name: p.open for p in _usage(pool_rows, taken)})


def get_pool(conn: Connection, name: str) -> PoolUsage:
    for pool in usage(conn):
        if pool.name == name:
            return pool
    raise PoolNotFoundError(name)


def set_pool(
    conn: Connection,
    name: str,
    slots: int,
    description: str | None = None,
    include_deferred: bool = False,
) -> bool:
    """Create or update a pool; True if it was created."""
    if not name or len(name) > 250:
        raise PoolError(f"a pool name must have 1 to 250 characters, got {name!r}")
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 0:
        raise PoolError(f"pool {name!r}: slots must be a whole number of 0 or more, got {slots!r}")
    values = {"slots": slots, "description": description, "include_deferred": include_deferred}
    if conn.execute(update(Pool).where(Pool.name == name).values(**values)).rowcount:
        return False
    conn.execute(insert(Pool).values(name=name, **values))
    return True


def delete_pool(conn: Connection, name: str) -> None:
    if name == DEFAULT_POOL:
        raise PoolError(
            "default_pool cannot be deleted (tasks without a pool use it); give it fewer "
            "slots with `tailrace pools set default_pool N` instead"
        )
    if conn.execute(delete(Pool).where(Pool.name == name)).rowcount != 1:
        raise PoolNotFoundError(name)
