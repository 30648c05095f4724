"""The API's cache of confirmed tokens: fresh for a moment, never past expiry, bounded."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tailrace.api._tokens import TokenCache
from tailrace.users import AuthenticatedUser, Role

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)
ALICE = AuthenticatedUser(1, "alice", Role.ADMIN)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_confirmed_token_is_served_from_the_cache_until_its_ttl_passes() -> None:
    clock = Clock()
    cache = TokenCache(ttl=2.0, clock=clock)
    cache.put("t", ALICE, None)
    clock.now += 1.9
    assert cache.get("t", NOW) == ALICE
    clock.now += 0.2
    assert cache.get("t", NOW) is None  # looked up again: a revocation elsewhere shows


def test_a_token_is_never_served_past_its_expiry() -> None:
    cache = TokenCache(ttl=60.0, clock=Clock())
    cache.put("t", ALICE, NOW + timedelta(seconds=1))
    assert cache.get("t", NOW) == ALICE
    assert cache.get("t", NOW + timedelta(seconds=1)) is None


def test_forgetting_a_token_takes_effect_at_once_and_the_cache_is_bounded() -> None:
    cache = TokenCache(max_entries=3, clock=Clock())
    cache.put("t", ALICE, None)
    cache.forget("t")
    assert cache.get("t", NOW) is None
    for n in range(10):
        cache.put(f"t{n}", ALICE, None)
    assert sum(cache.get(f"t{n}", NOW) is not None for n in range(10)) <= 3
