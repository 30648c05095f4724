from __future__ import annotations

import pytest

from tailrace.sdk import DAG, EmptyOperator, PythonOperator, TriggerRule
from tailrace.sdk.errors import InvalidTriggerRuleError

AIRFLOW_3_RULES = [
    "all_success",
    "all_failed",
    "all_done",
    "all_done_min_one_success",
    "all_skipped",
    "one_success",
    "one_failed",
    "one_done",
    "none_failed",
    "none_failed_min_one_success",
    "none_skipped",
    "always",
    "all_done_setup_success",
]


def test_all_airflow_rules_exist() -> None:
    assert TriggerRule.all_triggers() == set(AIRFLOW_3_RULES)


@pytest.mark.parametrize("rule", AIRFLOW_3_RULES)
def test_each_rule_parses_from_string(rule: str) -> None:
    with DAG("d"):
        op = EmptyOperator(task_id="t", trigger_rule=rule)
    assert op.trigger_rule is TriggerRule(rule)
    assert op.trigger_rule == rule
    assert TriggerRule.parse(rule) is TriggerRule(rule)


def test_enum_member_accepted() -> None:
    with DAG("d"):
        op = EmptyOperator(task_id="t", trigger_rule=TriggerRule.ONE_FAILED)
    assert op.trigger_rule == "one_failed"


def test_unknown_rule_fails_at_definition_naming_task_and_valid_rules() -> None:
    with DAG("trdag"), pytest.raises(InvalidTriggerRuleError) as info:
        EmptyOperator(task_id="picky", trigger_rule="all_sucess")
    message = str(info.value)
    assert "'all_sucess'" in message and "'picky'" in message
    assert info.value.task_id == "picky" and info.value.dag_id == "trdag"
    assert info.value.field == "trigger_rule"
    for rule in AIRFLOW_3_RULES:
        assert rule in message


def test_unknown_rule_on_mapped_task() -> None:
    with DAG("d"), pytest.raises(InvalidTriggerRuleError, match="'m'"):
        PythonOperator.partial(task_id="m", python_callable=print, trigger_rule="x").expand(
            op_args=[[1]]
        )
