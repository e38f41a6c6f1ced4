"""Routers decide from crafted replica states: load, KV usage, cached prefixes."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from sim.engine.router import ROUTERS, PrefixAwareRouter, make_router


@dataclass
class FakeReplica:
    num_outstanding: int = 0
    kv_usage: float = 0.0
    cached: dict[str, int] = field(default_factory=dict)

    def cached_prefix_tokens(self, request: object) -> int:
        return self.cached.get(str(request), 0)


def test_round_robin_cycles_in_order() -> None:
    router = make_router("round_robin")
    replicas = [FakeReplica(num_outstanding=n) for n in (9, 0, 0)]
    assert [router.choose("r", replicas) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_least_outstanding_ties_to_lowest_index() -> None:
    router = make_router("least_outstanding")
    assert router.choose("r", [FakeReplica(3), FakeReplica(1), FakeReplica(1)]) == 1
    assert router.choose("r", [FakeReplica(0), FakeReplica(0)]) == 0


def test_least_kv_prefers_free_cache_then_fewer_requests() -> None:
    router = make_router("least_kv")
    replicas = [FakeReplica(1, 0.5), FakeReplica(5, 0.2), FakeReplica(2, 0.2)]
    assert router.choose("r", replicas) == 2


def test_prefix_aware_follows_the_longest_cached_prefix() -> None:
    router = make_router("prefix_aware")
    replicas = [
        FakeReplica(2, cached={"a": 16}),
        FakeReplica(3, cached={"a": 320}),
        FakeReplica(1, cached={"a": 64}),
    ]
    assert router.choose("a", replicas) == 1
    # Nothing cached anywhere: least outstanding wins.
    assert router.choose("b", replicas) == 2


def test_prefix_aware_load_cap_skips_overloaded_replicas() -> None:
    router = PrefixAwareRouter(load_slack=0.5, headroom=2)
    assert router.load_cap(4) == 8
    replicas = [
        FakeReplica(9, cached={"a": 1000}),
        FakeReplica(4),
        FakeReplica(8, cached={"a": 16}),
    ]
    # Replica 0 holds the longest prefix but is over the cap (9 > 8).
    assert router.choose("a", replicas) == 2


def test_unknown_router_names_the_allowed_values() -> None:
    with pytest.raises(ValueError, match="allowed: round_robin, least_outstanding"):
        make_router("random")
    assert set(ROUTERS) == {"round_robin", "least_outstanding", "least_kv", "prefix_aware"}
