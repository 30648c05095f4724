"""The serialized form of DAGs: what the parser writes and what the scheduler reads.

The scheduler never imports user code; everything it needs to schedule a DAG is in these
structs. ``serialize_dag`` turns SDK objects into them (only ever called in the parser).
"""

from typing import TYPE_CHECKING, Any

from tailrace.serialization._json import dumps, loads
from tailrace.serialization._models import (
    AssetCondition,
    ExpandArg,
    SerializedAlias,
    SerializedAsset,
    SerializedDag,
    SerializedDeadline,
    SerializedParam,
    SerializedSchedule,
    SerializedStartTrigger,
    SerializedTask,
    SerializedWatcher,
    StreamSpec,
)

if TYPE_CHECKING:
    from tailrace.serialization._serialize import serialize_dag

__all__ = [
    # structs
    "AssetCondition",
    "ExpandArg",
    "SerializedAlias",
    "SerializedAsset",
    "SerializedDag",
    "SerializedDeadline",
    "SerializedParam",
    "SerializedSchedule",
    "SerializedStartTrigger",
    "SerializedTask",
    "SerializedWatcher",
    "StreamSpec",
    # JSON
    "dumps",
    "loads",
    # SDK objects to structs
    "serialize_dag",
]


def __getattr__(name: str) -> Any:
    # Serializing imports the SDK; reading serialized DAGs (the scheduler, the CLI) does not.
    if name == "serialize_dag":
        from tailrace.serialization._serialize import serialize_dag

        return serialize_dag
    raise AttributeError(f"module 'tailrace.serialization' has no attribute {name!r}")
