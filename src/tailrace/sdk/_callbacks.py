"""Task callbacks (``on_execute_callback``, ``on_success_callback`` ...) and what Tailrace
refuses of Airflow's authoring API, with what to do instead: argument values it cannot
honour yet, arguments and names it does not have (docs/airflow-compatibility.md lists
them all; tests/docs/test_airflow_compatibility.py keeps that page and these tables in
step with Airflow's own task SDK)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from tailrace.sdk._deadline import CUSTOM_REFERENCES
from tailrace.sdk.errors import (
    DagDefinitionError,
    UnsupportedArgumentError,
    UnsupportedNameError,
)

if TYPE_CHECKING:
    from tailrace.sdk._context import Context

Callback = Callable[["Context"], Any]
# What a callback argument takes.
Callbacks = Callable[..., Any] | list[Callable[..., Any]] | None

TASK_CALLBACKS = (
    "on_execute_callback",
    "on_success_callback",
    "on_failure_callback",
    "on_retry_callback",
    "on_skipped_callback",
)
# The callback a try's final state calls (a deferred or still-handling try calls none).
CALLBACK_OF_STATE = {
    "success": "on_success_callback",
    "failed": "on_failure_callback",
    "up_for_retry": "on_retry_callback",
    "skipped": "on_skipped_callback",
}


def as_callbacks(
    value: Any, *, name: str, dag_id: str | None, task_id: str | None
) -> list[Callback]:
    """A callback argument as a list: ``None``, one callable, or a list of callables."""
    if value is None:
        return []
    callbacks = list(value) if isinstance(value, list | tuple) else [value]
    for callback in callbacks:
        if not callable(callback):
            raise DagDefinitionError(
                f"{name} must be a callable or a list of callables, got {callback!r}",
                dag_id=dag_id,
                task_id=task_id,
                field=name,
                hint="Pass a function taking the task's context.",
            )
    return callbacks


def run_callbacks(task: Any, name: str, context: Context, log: logging.Logger) -> int:
    """Call each of ``task``'s (or a DAG's) ``name`` callbacks with ``context``, as Airflow
    does: one that raises is logged (in the task's log) and the others still run; the
    task's outcome does not change. Returns how many raised."""
    failed = 0
    for index, callback in enumerate(getattr(task, name, None) or ()):
        try:
            callback(context)
        except (Exception, SystemExit):  # not a timeout: it must still stop the task
            failed += 1
            log.exception(
                "%s #%d (%s) raised; the task's outcome is unchanged",
                name,
                index + 1,
                getattr(callback, "__qualname__", repr(callback)),
            )
    return failed


# Arguments Tailrace takes but does not act on yet: (is the value the default?, what to
# do). A default value changes nothing and is accepted.
_IGNORED_TASK_ARGS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "sla": (
        lambda v: v is None,
        "SLAs were removed in Airflow 3. Remove it, and give the DAG a deadline "
        "(deadline=DeadlineAlert(...)), or bound the task with execution_timeout.",
    ),
}

_IGNORED_DAG_ARGS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "sla_miss_callback": (
        lambda v: v is None,
        "SLAs were removed in Airflow 3. Remove it, and give the DAG a deadline "
        "(deadline=DeadlineAlert(reference=..., interval=..., callback=SyncCallback(fn))).",
    ),
}


WEIGHT_RULES = ("downstream", "upstream", "absolute")
_RULES = frozenset(WEIGHT_RULES)
# Airflow's priority weights are stored as 32-bit integers; so are ours.
_MAX_WEIGHT = 2**31 - 1


def check_priority(
    priority_weight: Any, weight_rule: Any, *, dag_id: str | None, task_id: str | None
) -> tuple[int, str]:
    """``priority_weight`` and ``weight_rule`` checked as Airflow takes them (a weight
    rule named by its value: "downstream", "upstream" or "absolute")."""
    # The common case without a call: parsing a 1,000-task file must not get slower.
    if (
        weight_rule in _RULES
        and priority_weight.__class__ is int
        and -_MAX_WEIGHT - 1 <= priority_weight <= _MAX_WEIGHT
    ):
        return priority_weight, weight_rule
    rule = str(getattr(weight_rule, "value", weight_rule))
    if rule not in WEIGHT_RULES:
        raise DagDefinitionError(
            f"weight_rule={weight_rule!r} is not one of {', '.join(WEIGHT_RULES)}",
            dag_id=dag_id,
            task_id=task_id,
            field="weight_rule",
            hint="Custom PriorityWeightStrategy classes are not supported: use one of "
            "the three rules.",
        )
    if isinstance(priority_weight, bool) or not isinstance(priority_weight, int):
        raise DagDefinitionError(
            f"priority_weight must be an integer, got {priority_weight!r}",
            dag_id=dag_id,
            task_id=task_id,
            field="priority_weight",
        )
    return max(-_MAX_WEIGHT - 1, min(_MAX_WEIGHT, priority_weight)), rule


def check_pool_slots(value: Any, *, dag_id: str | None, task_id: str | None) -> int:
    """``pool_slots``: a whole number of at least 1, as in Airflow."""
    if value.__class__ is not int or value < 1:
        raise DagDefinitionError(
            f"pool_slots must be a whole number of at least 1, got {value!r}",
            dag_id=dag_id,
            task_id=task_id,
            field="pool_slots",
        )
    return value


def _refuse(
    table: Mapping[str, tuple[Callable[[Any], bool], str]],
    values: Mapping[str, Any],
    *,
    dag_id: str | None,
    task_id: str | None,
) -> None:
    for field, (is_default, hint) in table.items():
        value = values.get(field)
        if field in values and not is_default(value):
            raise UnsupportedArgumentError(
                dag_id=dag_id, task_id=task_id, field=field, value=value, hint=hint
            )


def refuse_ignored_task_args(
    values: Mapping[str, Any], *, dag_id: str | None, task_id: str | None
) -> None:
    """Raise :class:`UnsupportedArgumentError` for the first task argument in ``values``
    that Tailrace would have to ignore."""
    _refuse(_IGNORED_TASK_ARGS, values, dag_id=dag_id, task_id=task_id)


def refuse_ignored_dag_args(values: Mapping[str, Any], *, dag_id: str) -> None:
    """The same for a DAG's arguments."""
    _refuse(_IGNORED_DAG_ARGS, values, dag_id=dag_id, task_id=None)


# --- names and arguments of Airflow 3's authoring API that Tailrace does not have --------

_ASSETS = (
    "Tailrace's assets (Asset, AssetAlias, & and | conditions, AssetWatcher, @asset) do not "
    "have this: schedule on those, on a cron expression or a timedelta, or post asset "
    "events through the REST API."
)
_PARTITIONS = "Asset partitions are not in Tailrace. " + _ASSETS
_TIMETABLES = (
    "Pass schedule= a cron expression, a preset such as '@daily' or a timedelta: Tailrace's "
    "schedules follow CronTriggerTimetable / DeltaTriggerTimetable semantics."
)
_RETRY_POLICY = (
    "Retry policies are not in Tailrace: use retries, retry_delay, retry_exponential_backoff "
    "and max_retry_delay, or raise FailTask to fail without retrying."
)

# Airflow names (``airflow.sdk``, the standard provider's operators and sensors, and
# ``task.<name>`` decorators) that ``tailrace`` refuses: using one raises
# UnsupportedNameError with the hint.
REFUSED_NAMES: dict[str, str] = {
    **dict.fromkeys(
        (
            "AssetAccessControl",
            "AssetOrTimeSchedule",
            "Metadata",
        ),
        _ASSETS,
    ),
    **dict.fromkeys(
        (
            "AllowedKeyMapper",
            "ChainMapper",
            "CronPartitionTimetable",
            "DayWindow",
            "FanOutMapper",
            "FixedKeyMapper",
            "HourWindow",
            "IdentityMapper",
            "MinimumCount",
            "MonthWindow",
            "PartitionMapper",
            "PartitionedAssetTimetable",
            "PartitionedAtRuntime",
            "ProductMapper",
            "QuarterWindow",
            "RollupMapper",
            "SegmentWindow",
            "StartOfDayMapper",
            "StartOfHourMapper",
            "StartOfMonthMapper",
            "StartOfQuarterMapper",
            "StartOfWeekMapper",
            "StartOfYearMapper",
            "WaitForAll",
            "WeekWindow",
            "Window",
            "YearWindow",
        ),
        _PARTITIONS,
    ),
    **dict.fromkeys(
        (
            "CronDataIntervalTimetable",
            "CronTriggerTimetable",
            "DeltaDataIntervalTimetable",
            "DeltaTriggerTimetable",
            "EventsTimetable",
            "MultipleCronTriggerTimetable",
        ),
        _TIMETABLES,
    ),
    **dict.fromkeys(("BaseDeadlineReference", "deadline_reference"), CUSTOM_REFERENCES),
    "NEVER_EXPIRE": "The task state store is not in Tailrace: keep a task's state in a "
    "Variable or an XCom.",
    **dict.fromkeys(
        ("ExceptionRetryPolicy", "RetryAction", "RetryDecision", "RetryPolicy", "RetryRule"),
        _RETRY_POLICY,
    ),
    "BaseAsyncOperator": "Write an async trigger (BaseTrigger) and defer to it from a "
    "BaseOperator: the wait runs in the triggerer.",
    "BaseHook": "Tailrace's hooks are in tailrace.providers (HttpHook, SqlHook); read "
    "credentials with tailrace.sdk.connections.get_connection(conn_id).",
    "BaseNotifier": "Notifiers are not in Tailrace: call your notification code from an "
    "on_failure_callback or on_success_callback.",
    "BaseOperatorLink": "Operator extra links are not in Tailrace's UI: remove it.",
    "BaseXCom": "Custom XCom backends are not in Tailrace: XComs are JSON in the metadata "
    "database; store large values elsewhere and push a reference.",
    "BranchMixIn": "Subclass BaseBranchOperator (choose_branch) instead.",
    "Connection": "Use tailrace.sdk.connections.get_connection(conn_id), which returns "
    "Tailrace's Connection (conn_type, host, port, login, password, schema, extra).",
    "DagRunState": "Compare with the state's string value ('success', 'failed', 'running', "
    "'queued').",
    "TaskInstanceState": "Compare with the state's string value ('success', 'failed', "
    "'skipped', 'upstream_failed' ...).",
    "ObjectStoragePath": "Object storage paths are not in Tailrace: use the storage's own "
    "client (fsspec, boto3 ...) in the task.",
    "ResumableJobMixin": "Defer to a trigger that polls the external job instead.",
    "SkipMixin": "Raise SkipTask in the task, or use a branch operator.",
    "TaskInstance": "A running task's instance is context['ti'] (a RuntimeTaskInstance).",
    "WeightRule": "priority_weight and weight_rule are refused (only their defaults are "
    "accepted): remove them.",
    "conf": "Airflow's configuration is not Tailrace's: read Tailrace settings from "
    "TAILRACE_* environment variables, or your own settings from Variable.get().",
    "get_parsing_context": "Parse-time context is not in Tailrace: every DAG of a file is "
    "parsed each time.",
    "lineage": "Lineage is not in Tailrace: remove it.",
    "literal": "Pass the value itself: Tailrace renders templates only in template_fields.",
    "result": "Return the value from the task; it becomes its return_value XCom.",
    # the standard provider
    "BashSensor": "Use a PythonOperator or @task that runs the command with subprocess, "
    "or a BashOperator with retries.",
    "BranchDateTimeOperator": "Use @task.branch comparing datetime.now() (or the logical "
    "date) with your bounds.",
    "BranchDayOfWeekOperator": "Use @task.branch on logical_date.weekday().",
    "DayOfWeekSensor": "Use @task.short_circuit on logical_date.weekday(), or a cron "
    "schedule for those days.",
    "PythonSensor": "Use @task with a PokeReturnValue-returning BaseSensorOperator "
    "subclass (poke()), or DateTimeSensorAsync/TimeDeltaSensorAsync for time.",
    "SmoothOperator": "Remove it: it only logs a link to a song.",
    "TimeSensor": "Use DateTimeSensorAsync with target_time='{{ ... }}' for that time of "
    "the run's day.",
    "WaitSensor": "Use TimeDeltaSensorAsync(delta=...), which waits in the triggerer.",
    # task.<name> decorators
    "task.sensor": "Subclass BaseSensorOperator (poke() returning PokeReturnValue) instead.",
    "task.stub": "Stub tasks for other languages' SDKs are not in Tailrace.",
}

_TEMPLATES_EXTS = (
    "Put the file's content in templates_dict, or read the file in the task: template "
    "files are read for template_ext of an operator's fields only."
)

# What the operators running the callable in another interpreter (a virtualenv's, an
# external one) refuse, and take only at Tailrace's default.
_IN_ANOTHER_PYTHON = {
    "serializer": "Remove it: arguments and the return value cross into the interpreter "
    "as JSON, as XComs are stored; pass JSON-serializable values.",
    "templates_exts": _TEMPLATES_EXTS,
}
_EXPECT_AIRFLOW = (
    "Leave it out or pass False: Tailrace is not installed in the interpreter, so the "
    "callable gets only the JSON context values it names (ds, ts, run_id, params ...), as "
    "Airflow's does when Airflow is not installed there."
)

# Arguments of Airflow's classes that Tailrace's do not take: passing one raises
# UnsupportedArgumentError with the hint (class names match Airflow's).
REFUSED_ARGS: dict[str, dict[str, str]] = {
    "DAG": {
        "max_consecutive_failed_dag_runs": "Remove it: Tailrace does not pause a DAG after "
        "failed runs.",
        "access_control": "Tailrace's roles (admin, viewer) apply to every DAG: remove it.",
        "auto_register": "Remove it: every DAG a DAG file defines at import is registered.",
        "fail_fast": "Remove it: Tailrace does not stop a run's other tasks when one fails.",
        "allowed_run_types": "Remove it: every DAG allows scheduled, manual and backfill runs.",
        "task_group": "Remove it: tasks join the DAG's root group, or a TaskGroup you open.",
        "disable_bundle_versioning": "Remove it: Tailrace has no DAG bundles.",
        "rerun_with_latest_version": "Remove it: a cleared task runs the DAG file as it is now.",
    },
    "BaseOperator": {
        "retry_policy": _RETRY_POLICY,
        "ignore_first_depends_on_past": "depends_on_past is refused, and this with it: remove it.",
        "wait_for_past_depends_before_skipping": "depends_on_past is refused, and this with "
        "it: remove it.",
        "pre_execute": "Override pre_execute(self, context) in an operator subclass, or use "
        "on_execute_callback.",
        "post_execute": "Override post_execute(self, context, result) in an operator "
        "subclass, or use on_success_callback.",
        "resources": "Remove it: Tailrace's executors do not reserve resources per task.",
        "run_as_user": "Remove it: tasks run as the worker's user.",
        "executor": "Remove it: a deployment has one executor (the executor setting).",
        "doc_json": "Use doc_md or doc.",
        "doc_yaml": "Use doc_md or doc.",
        "doc_rst": "Use doc_md or doc.",
        "logger_name": "Remove it: the operator's lines go to the task's log.",
        "allow_nested_operators": "Remove it: operators are not run inside other operators.",
        "render_template_as_native_obj": "Set render_template_as_native_obj on the DAG.",
    },
    "BaseSensorOperator": {
        "silent_fail": "Use soft_fail=True (the sensor is skipped instead of failing).",
        "never_fail": "Use soft_fail=True (the sensor is skipped instead of failing).",
    },
    "PythonOperator": {"templates_exts": _TEMPLATES_EXTS},
    "PythonVirtualenvOperator": {
        **_IN_ANOTHER_PYTHON,
        "index_urls_from_connection_ids": "Pass the index URLs in index_urls.",
    },
    "ExternalPythonOperator": _IN_ANOTHER_PYTHON,
    "HITLOperator": {
        "notifiers": "Notifiers are not in Tailrace: send the notification from an "
        "upstream task or an on_execute_callback.",
        "assigned_users": "Remove it: any admin may respond (Tailrace's roles are admin and "
        "viewer).",
    },
    "FileSensor": {
        "fs_conn_id": "Remove it: FileSensor reads the local file system of the worker (or "
        "the triggerer, for FileSensorAsync).",
        "start_from_trigger": "Use FileSensorAsync, which waits in the triggerer.",
        "trigger_kwargs": "Use FileSensorAsync, which waits in the triggerer.",
    },
}


# Arguments of operators Tailrace has that it takes only at their default (a falsy value):
# any other value raises UnsupportedArgumentError with the hint.
DEFAULT_ONLY_ARGS: dict[str, dict[str, str]] = {
    "TriggerDagRunOperator": {
        "reset_dag_run": "Clear the existing run with `tailrace tasks clear` instead.",
        "skip_when_already_exists": "Remove it: a run id that exists is taken to be this "
        "task's own run.",
        "fail_when_dag_is_paused": "Remove it: manual runs of a paused DAG run in Tailrace.",
        "note": "Remove it: Tailrace's runs have no notes.",
        "run_after": "Use logical_date.",
    },
    "ExternalTaskSensor": {
        "external_task_group_id": "Name the group's tasks in external_task_ids.",
    },
    "PythonVirtualenvOperator": {"expect_airflow": _EXPECT_AIRFLOW},
    "ExternalPythonOperator": {
        "expect_airflow": _EXPECT_AIRFLOW,
        "expect_pendulum": "Leave it out or pass False: dates reach the interpreter as "
        "the JSON strings ds, ts ... (no pendulum objects); parse them there, with "
        "pendulum.parse(ts) if pendulum is installed.",
    },
}


def refuse_non_default(
    owner: str, values: Mapping[str, Any], *, dag_id: str | None, task_id: str | None
) -> None:
    """Raise UnsupportedArgumentError for the first of ``owner``'s default-only arguments
    given a value."""
    for field, hint in DEFAULT_ONLY_ARGS[owner].items():
        if values.get(field):
            raise UnsupportedArgumentError(
                dag_id=dag_id, task_id=task_id, field=field, value=values[field], hint=hint
            )


def refused_name(name: str) -> NoReturn:
    """Raise UnsupportedNameError for an Airflow name Tailrace refuses (a KeyError for
    one it does not know: the caller raises its own error then)."""
    raise UnsupportedNameError(name=name, hint=REFUSED_NAMES[name])


def refuse_unknown_args(
    owners: Iterable[str],
    values: Mapping[str, Any],
    *,
    kind: str,
    dag_id: str | None,
    task_id: str | None,
) -> None:
    """Raise for the first argument in ``values``: UnsupportedArgumentError naming what
    to do when it is an Airflow argument Tailrace refuses, else a DagDefinitionError
    for an argument no one takes. ``owners`` are the class names that may refuse it."""
    if not values:
        return
    owners = list(owners)
    for field in sorted(values):
        for owner in owners:
            hint = REFUSED_ARGS.get(owner, {}).get(field)
            if hint is not None:
                raise UnsupportedArgumentError(
                    dag_id=dag_id, task_id=task_id, field=field, value=values[field], hint=hint
                )
    raise DagDefinitionError(
        f"Invalid arguments were passed to {kind}: {sorted(values)}",
        dag_id=dag_id,
        task_id=task_id,
        field=sorted(values)[0],
        hint="Remove them or check their spelling.",
    )
