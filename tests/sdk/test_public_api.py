"""The public names of the SDK are pinned: changing them is a deliberate decision."""

from __future__ import annotations

import tailrace
import tailrace.sdk
import tailrace.sdk.errors
import tailrace.sdk.execution
import tailrace.sdk.operators
import tailrace.sdk.sensors
import tailrace.sdk.triggers


def test_sdk_all_is_pinned() -> None:
    assert sorted(tailrace.sdk.__all__) == sorted(
        [
            "DAG",
            "dag",
            "Param",
            "ParamsDict",
            "AsyncCallback",
            "DeadlineAlert",
            "DeadlineReference",
            "SyncCallback",
            "BaseOperator",
            "BaseOperatorMeta",
            "MappedOperator",
            "OperatorPartial",
            "TaskGroup",
            "TriggerRule",
            "XComArg",
            "chain",
            "cross_downstream",
            "task",
            "task_group",
            "Asset",
            "AssetAlias",
            "AssetAll",
            "AssetAny",
            "AssetEvent",
            "AssetWatcher",
            "asset",
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
            "BaseSensorOperator",
            "PokeReturnValue",
            "DateTimeSensor",
            "DateTimeSensorAsync",
            "FileSensor",
            "FileSensorAsync",
            "TimeDeltaSensor",
            "TimeDeltaSensorAsync",
            "BaseTrigger",
            "StartTriggerArgs",
            "TaskFailedEvent",
            "TaskSuccessEvent",
            "TriggerEvent",
            "defer",
            "DateTimeTrigger",
            "FileTrigger",
            "TimeDeltaTrigger",
            "Context",
            "macros",
            "Variable",
            "EdgeModifier",
            "Label",
            "chain_linear",
            "TriggerDagRunOperator",
            "ExternalTaskSensor",
            "ApprovalOperator",
            "HITLBranchOperator",
            "HITLEntryOperator",
            "HITLOperator",
            "setup",
            "teardown",
            "get_current_context",
            "AirflowFailException",
            "AirflowSensorTimeout",
            "AirflowSkipException",
            "AirflowTaskTimeout",
            "FailTask",
            "SensorTimeout",
            "SkipTask",
            "TaskDeferred",
            "TaskExecutionTimeout",
            "NOTSET",
            "ArgNotSet",
        ]
    )
    assert len(set(tailrace.sdk.__all__)) == len(tailrace.sdk.__all__)


def test_every_exported_name_exists() -> None:
    for module in (
        tailrace.sdk,
        tailrace.sdk.errors,
        tailrace.sdk.execution,
        tailrace.sdk.operators,
        tailrace.sdk.sensors,
        tailrace.sdk.triggers,
        tailrace,
    ):
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name}"


def test_top_level_package_re_exports_the_sdk() -> None:
    assert sorted(tailrace.__all__) == sorted(tailrace.sdk.__all__)
    assert tailrace.DAG is tailrace.sdk.DAG
    assert tailrace.task is tailrace.sdk.task


def test_execution_all_is_pinned() -> None:
    assert sorted(tailrace.sdk.execution.__all__) == [
        "CALLBACK_OF_STATE",
        "Context",
        "DagRunInfo",
        "DeadlineCallbackTrigger",
        "RuntimeTaskInstance",
        "build_context",
        "build_dag_run_context",
        "call_deadline_callback",
        "execute_task",
        "render_map_index",
        "rendered_template_fields",
        "resolve_task",
        "run_callbacks",
        "set_current_context",
    ]


def test_errors_all_is_pinned() -> None:
    assert sorted(tailrace.sdk.errors.__all__) == sorted(
        [
            "TailraceError",
            "DagDefinitionError",
            "UnsupportedArgumentError",
            "DuplicateTaskIdError",
            "DagCycleError",
            "InvalidScheduleError",
            "InvalidAssetError",
            "ParamValidationError",
            "InvalidTriggerRuleError",
            "InvalidIdError",
            "TemplateRenderError",
            "MultipleOutputsError",
            "CommandFailedError",
            "ConnectionNotFoundError",
            "VariableNotFoundError",
            "UnsupportedNameError",
            "TriggerArgumentError",
            "TriggerLoadError",
            "SkipTask",
            "FailTask",
            "SensorTimeout",
            "TaskDeferred",
            "TaskExecutionTimeout",
            "AirflowSkipException",
            "AirflowFailException",
            "AirflowSensorTimeout",
            "AirflowTaskTimeout",
        ]
    )


def test_triggers_all_is_pinned() -> None:
    assert sorted(tailrace.sdk.triggers.__all__) == sorted(
        [
            "BaseTrigger",
            "BaseEventTrigger",
            "TriggerEvent",
            "TaskSuccessEvent",
            "TaskFailedEvent",
            "StartTriggerArgs",
            "DateTimeTrigger",
            "FileTrigger",
            "TimeDeltaTrigger",
            "HANDLE_TRIGGER_EVENTS",
            "RESUME_TASKFLOW",
            "check_trigger_kwargs",
            "load_trigger",
            "task_end_of",
        ]
    )
    assert tailrace.sdk.triggers.RESUME_TASKFLOW == "__resume_taskflow__"


def test_sensors_all_is_pinned() -> None:
    assert sorted(tailrace.sdk.sensors.__all__) == [
        "BaseSensorOperator",
        "DateTimeSensor",
        "DateTimeSensorAsync",
        "FileSensor",
        "FileSensorAsync",
        "PokeReturnValue",
        "TimeDeltaSensor",
        "TimeDeltaSensorAsync",
    ]


def test_signals_and_their_airflow_aliases() -> None:
    from tailrace.sdk import errors

    assert errors.AirflowSkipException is errors.SkipTask
    assert errors.AirflowFailException is errors.FailTask
    assert errors.AirflowTaskTimeout is errors.TaskExecutionTimeout
    assert issubclass(errors.SkipTask, Exception)
    assert issubclass(errors.FailTask, Exception)
    assert not issubclass(errors.TaskExecutionTimeout, Exception)
    assert not issubclass(errors.TaskDeferred, Exception)
    assert issubclass(errors.TaskDeferred, BaseException)
    assert errors.AirflowSensorTimeout is errors.SensorTimeout
    assert issubclass(errors.SensorTimeout, errors.FailTask)
    assert issubclass(errors.TriggerArgumentError, errors.DagDefinitionError)
    assert issubclass(errors.DagDefinitionError, errors.TailraceError)
