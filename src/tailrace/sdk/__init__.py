"""Tailrace's authoring SDK: everything needed to write DAGs, and nothing more.

Importing it needs no database, scheduler or web server. The names follow Airflow 3's
task SDK, so an Airflow DAG file ports by changing ``from airflow.sdk import ...`` to
``from tailrace import ...``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tailrace.sdk._assets import (
        Asset,
        AssetAlias,
        AssetAll,
        AssetAny,
        AssetEvent,
        AssetWatcher,
        asset,
    )
    from tailrace.sdk._baseoperator import (
        BaseOperator,
        BaseOperatorMeta,
        chain,
        chain_linear,
        cross_downstream,
    )
    from tailrace.sdk._context import Context, get_current_context
    from tailrace.sdk._cross_dag import ExternalTaskSensor, TriggerDagRunOperator
    from tailrace.sdk._dag import DAG, dag
    from tailrace.sdk._deadline import (
        AsyncCallback,
        DeadlineAlert,
        DeadlineReference,
        SyncCallback,
    )
    from tailrace.sdk._decorators import task
    from tailrace.sdk._defer import defer
    from tailrace.sdk._mapped import MappedOperator, OperatorPartial
    from tailrace.sdk._node import EdgeModifier, Label
    from tailrace.sdk._params import Param, ParamsDict
    from tailrace.sdk._setup_teardown import setup, teardown
    from tailrace.sdk._taskgroup import TaskGroup, task_group
    from tailrace.sdk._trigger_rule import TriggerRule
    from tailrace.sdk._types import NOTSET, ArgNotSet
    from tailrace.sdk._xcom_arg import XComArg
    from tailrace.sdk.errors import (
        AirflowFailException,
        AirflowSensorTimeout,
        AirflowSkipException,
        AirflowTaskTimeout,
        FailTask,
        SensorTimeout,
        SkipTask,
        TaskDeferred,
        TaskExecutionTimeout,
    )
    from tailrace.sdk.operators import (
        BaseBranchOperator,
        BashOperator,
        BranchExternalPythonOperator,
        BranchPythonOperator,
        BranchPythonVirtualenvOperator,
        EmptyOperator,
        ExternalPythonOperator,
        LatestOnlyOperator,
        PythonOperator,
        PythonVirtualenvOperator,
        ShortCircuitOperator,
    )
    from tailrace.sdk.operators.hitl import (
        ApprovalOperator,
        HITLBranchOperator,
        HITLEntryOperator,
        HITLOperator,
    )
    from tailrace.sdk.sensors import (
        BaseSensorOperator,
        DateTimeSensor,
        DateTimeSensorAsync,
        FileSensor,
        FileSensorAsync,
        PokeReturnValue,
        TimeDeltaSensor,
        TimeDeltaSensorAsync,
    )
    from tailrace.sdk.triggers import (
        BaseTrigger,
        DateTimeTrigger,
        FileTrigger,
        StartTriggerArgs,
        TaskFailedEvent,
        TaskSuccessEvent,
        TimeDeltaTrigger,
        TriggerEvent,
    )
    from tailrace.sdk.variables import Variable

# Each name is imported from its module when first used, so importing one part of the
# SDK (``tailrace.sdk.errors``, say, as the core does) does not load all of it.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "tailrace.sdk._assets": (
        "Asset",
        "AssetAlias",
        "AssetAll",
        "AssetAny",
        "AssetEvent",
        "AssetWatcher",
        "asset",
    ),
    "tailrace.sdk._baseoperator": (
        "BaseOperator",
        "BaseOperatorMeta",
        "chain",
        "chain_linear",
        "cross_downstream",
    ),
    "tailrace.sdk._node": ("EdgeModifier", "Label"),
    "tailrace.sdk._context": ("Context", "get_current_context"),
    "tailrace.sdk._cross_dag": ("ExternalTaskSensor", "TriggerDagRunOperator"),
    "tailrace.sdk._dag": ("DAG", "dag"),
    "tailrace.sdk._deadline": (
        "AsyncCallback",
        "DeadlineAlert",
        "DeadlineReference",
        "SyncCallback",
    ),
    "tailrace.sdk._decorators": ("task",),
    "tailrace.sdk._defer": ("defer",),
    "tailrace.sdk._mapped": ("MappedOperator", "OperatorPartial"),
    "tailrace.sdk._params": ("Param", "ParamsDict"),
    "tailrace.sdk._setup_teardown": ("setup", "teardown"),
    "tailrace.sdk._taskgroup": ("TaskGroup", "task_group"),
    "tailrace.sdk._trigger_rule": ("TriggerRule",),
    "tailrace.sdk._types": ("NOTSET", "ArgNotSet"),
    "tailrace.sdk._xcom_arg": ("XComArg",),
    "tailrace.sdk.errors": (
        "AirflowFailException",
        "AirflowSensorTimeout",
        "AirflowSkipException",
        "AirflowTaskTimeout",
        "FailTask",
        "SensorTimeout",
        "SkipTask",
        "TaskDeferred",
        "TaskExecutionTimeout",
    ),
    "tailrace.sdk.operators": (
        "BaseBranchOperator",
        "BashOperator",
        "BranchExternalPythonOperator",
        "BranchPythonOperator",
        "BranchPythonVirtualenvOperator",
        "EmptyOperator",
        "ExternalPythonOperator",
        "LatestOnlyOperator",
        "PythonOperator",
        "PythonVirtualenvOperator",
        "ShortCircuitOperator",
    ),
    "tailrace.sdk.operators.hitl": (
        "ApprovalOperator",
        "HITLBranchOperator",
        "HITLEntryOperator",
        "HITLOperator",
    ),
    "tailrace.sdk.sensors": (
        "BaseSensorOperator",
        "DateTimeSensor",
        "DateTimeSensorAsync",
        "FileSensor",
        "FileSensorAsync",
        "PokeReturnValue",
        "TimeDeltaSensor",
        "TimeDeltaSensorAsync",
    ),
    "tailrace.sdk.variables": ("Variable",),
    "tailrace.sdk.triggers": (
        "BaseTrigger",
        "DateTimeTrigger",
        "FileTrigger",
        "StartTriggerArgs",
        "TaskFailedEvent",
        "TaskSuccessEvent",
        "TimeDeltaTrigger",
        "TriggerEvent",
    ),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}


def __getattr__(name: str) -> Any:
    if name == "macros":  # Airflow's ``from airflow.sdk import macros``: the module itself
        value = importlib.import_module("tailrace.sdk._macros")
        globals()[name] = value
        return value
    module = _MODULE_OF.get(name)
    if module is None:
        from tailrace.sdk._callbacks import REFUSED_NAMES, refused_name

        if name in REFUSED_NAMES:
            refused_name(name)
        raise AttributeError(f"module 'tailrace.sdk' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [  # noqa: RUF022 - grouped by concept, sorted within groups
    # DAGs
    "DAG",
    "dag",
    "Param",
    "ParamsDict",
    # deadline alerts
    "AsyncCallback",
    "DeadlineAlert",
    "DeadlineReference",
    "SyncCallback",
    # tasks and dependencies
    "BaseOperator",
    "BaseOperatorMeta",
    "MappedOperator",
    "OperatorPartial",
    "TaskGroup",
    "TriggerRule",
    "XComArg",
    "EdgeModifier",
    "Label",
    "chain",
    "chain_linear",
    "cross_downstream",
    "setup",
    "task",
    "task_group",
    "teardown",
    # assets and data-aware scheduling
    "Asset",
    "AssetAlias",
    "AssetAll",
    "AssetAny",
    "AssetEvent",
    "AssetWatcher",
    "asset",
    # operators
    "BaseBranchOperator",
    "BashOperator",
    "BranchExternalPythonOperator",
    "BranchPythonOperator",
    "BranchPythonVirtualenvOperator",
    "EmptyOperator",
    "ExternalPythonOperator",
    "LatestOnlyOperator",
    "PythonOperator",
    "PythonVirtualenvOperator",
    "ShortCircuitOperator",
    "TriggerDagRunOperator",
    # human in the loop
    "ApprovalOperator",
    "HITLBranchOperator",
    "HITLEntryOperator",
    "HITLOperator",
    # sensors
    "BaseSensorOperator",
    "PokeReturnValue",
    "DateTimeSensor",
    "DateTimeSensorAsync",
    "ExternalTaskSensor",
    "FileSensor",
    "FileSensorAsync",
    "TimeDeltaSensor",
    "TimeDeltaSensorAsync",
    # deferral and triggers
    "BaseTrigger",
    "StartTriggerArgs",
    "TaskFailedEvent",
    "TaskSuccessEvent",
    "TriggerEvent",
    "defer",
    "DateTimeTrigger",
    "FileTrigger",
    "TimeDeltaTrigger",
    # run-time context and settings
    "Context",
    "macros",
    "Variable",
    "get_current_context",
    # control-flow signals raised by task code
    "AirflowFailException",
    "AirflowSensorTimeout",
    "AirflowSkipException",
    "AirflowTaskTimeout",
    "FailTask",
    "SensorTimeout",
    "SkipTask",
    "TaskDeferred",
    "TaskExecutionTimeout",
    # sentinels
    "NOTSET",
    "ArgNotSet",
]
