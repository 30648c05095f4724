"""Trigger rules: when a task may run given the states of its upstream tasks."""

from __future__ import annotations

from enum import StrEnum

from tailrace.sdk.errors import InvalidTriggerRuleError


class TriggerRule(StrEnum):
    """The condition on upstream task states under which a task runs (Airflow 3's rules)."""

    ALL_SUCCESS = "all_success"
    ALL_FAILED = "all_failed"
    ALL_DONE = "all_done"
    ALL_DONE_MIN_ONE_SUCCESS = "all_done_min_one_success"
    ALL_DONE_SETUP_SUCCESS = "all_done_setup_success"
    ALL_SKIPPED = "all_skipped"
    ONE_SUCCESS = "one_success"
    ONE_FAILED = "one_failed"
    ONE_DONE = "one_done"
    NONE_FAILED = "none_failed"
    NONE_FAILED_MIN_ONE_SUCCESS = "none_failed_min_one_success"
    NONE_SKIPPED = "none_skipped"
    ALWAYS = "always"

    @classmethod
    def is_valid(cls, value: object) -> bool:
        """Whether ``value`` names a trigger rule."""
        return isinstance(value, str) and value in cls._value2member_map_

    @classmethod
    def all_triggers(cls) -> set[str]:
        """The names of every trigger rule."""
        return {rule.value for rule in cls}

    @classmethod
    def parse(
        cls, value: object, *, task_id: str | None = None, dag_id: str | None = None
    ) -> TriggerRule:
        """Return the rule named by ``value``; raise :class:`InvalidTriggerRuleError` if none is."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str) and cls.is_valid(value):
            return cls(value)
        raise InvalidTriggerRuleError(
            task_id=task_id, trigger_rule=value, valid=[r.value for r in cls], dag_id=dag_id
        )
