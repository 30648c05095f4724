from __future__ import annotations

import pytest

from tailrace.scheduler.trigger_rules import Decision, UpstreamCounts, evaluate

R, W, S, U = Decision.READY, Decision.WAIT, Decision.SKIP, Decision.UPSTREAM_FAILED


def counts(*states: str | None) -> UpstreamCounts:
    return UpstreamCounts.of(states)


@pytest.mark.parametrize(
    ("rule", "states", "expected"),
    [
        ("all_success", ("success", "success"), R),
        ("all_success", ("success", None), W),
        ("all_success", ("failed", None), U),
        ("all_success", ("upstream_failed", "success"), U),
        ("all_success", ("skipped", "success"), S),
        ("all_failed", ("failed", "upstream_failed"), R),
        ("all_failed", ("failed", "success"), S),
        ("all_failed", ("failed", None), W),
        ("all_done", ("failed", "skipped", "success"), R),
        ("all_done", ("failed", "running"), W),
        ("all_done_min_one_success", ("failed", "success"), R),
        ("all_done_min_one_success", ("failed", "skipped"), S),
        ("all_skipped", ("skipped", "skipped"), R),
        ("all_skipped", ("skipped", "success"), S),
        ("one_success", ("success", None), R),
        ("one_success", ("failed", "skipped"), U),
        ("one_success", ("skipped", "skipped"), S),
        ("one_failed", ("failed", None), R),
        ("one_failed", ("success", "skipped"), S),
        ("one_failed", ("success", None), W),
        ("one_done", ("failed", None), R),
        ("one_done", ("skipped", "skipped"), S),
        ("none_failed", ("success", "skipped"), R),
        ("none_failed", ("upstream_failed", None), U),
        ("none_failed_min_one_success", ("success", "skipped"), R),
        ("none_failed_min_one_success", ("skipped", "skipped"), S),
        ("none_skipped", ("success", "failed"), R),
        ("none_skipped", ("skipped", None), S),
        ("always", (None, "failed"), R),
        ("all_done_setup_success", ("success", "failed"), R),
    ],
)
def test_rule(rule: str, states: tuple[str | None, ...], expected: Decision) -> None:
    assert evaluate(rule, counts(*states)) is expected


def test_no_upstream_is_always_ready() -> None:
    assert evaluate("all_failed", counts()) is R


def test_unknown_rule_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown trigger rule 'sometimes'"):
        evaluate("sometimes", counts("success"))


def test_every_rule_the_planner_waits_on_without_counting_waits_while_nothing_is_done() -> None:
    # The planner skips counting for a task none of whose upstream instances is done
    # (_planner._nothing_done_upstream): that must be what `evaluate` decides.
    from tailrace.scheduler._planner import _WAIT_UNTIL_ONE_DONE

    for rule in _WAIT_UNTIL_ONE_DONE:
        for total in (1, 2, 5):
            assert evaluate(rule, UpstreamCounts(total=total)) is Decision.WAIT, rule
