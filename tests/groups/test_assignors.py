"""Assignors: every subscribed partition goes to exactly one subscribed member, balanced."""
from __future__ import annotations

import pytest

from ember.groups.assignors import ASSIGNORS, range_assign, roundrobin_assign, sticky_assign
from ember.wire.group_protocol import ASSIGNOR_NAMES
from ember.wire.types import TopicPartition as TP


def owners(assignment: dict[str, list[TP]]) -> dict[TP, str]:
    seen: dict[TP, str] = {}
    for member, tps in assignment.items():
        for tp in tps:
            assert tp not in seen, f"{tp} assigned twice"
            seen[tp] = member
    return seen


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
@pytest.mark.parametrize("members", [1, 2, 3, 4, 7])
def test_every_partition_once_and_balanced(name: str, members: int) -> None:
    subs = {f"m{i}": ["a", "b"] for i in range(members)}
    out = ASSIGNORS[name](subs, {"a": 6, "b": 3}, {})
    assert set(owners(out)) == {TP("a", p) for p in range(6)} | {TP("b", p) for p in range(3)}
    sizes = [len(tps) for tps in out.values()]
    assert set(out) == set(subs)
    if name != "range":          # range balances per topic, not overall
        assert max(sizes) - min(sizes) <= 1


def test_range_gives_consecutive_ranges_extra_to_first() -> None:
    out = range_assign({"m1": ["t"], "m2": ["t"], "m3": ["t"]}, {"t": 7})
    assert out == {"m1": [TP("t", 0), TP("t", 1), TP("t", 2)], "m2": [TP("t", 3), TP("t", 4)],
                   "m3": [TP("t", 5), TP("t", 6)]}


def test_members_beyond_partition_count_stay_idle() -> None:
    for assign in ASSIGNORS.values():
        out = assign({f"m{i}": ["t"] for i in range(5)}, {"t": 2}, {})
        assert sum(len(v) for v in out.values()) == 2
        assert sum(1 for v in out.values() if not v) == 3


def test_roundrobin_skips_unsubscribed_members() -> None:
    out = roundrobin_assign({"m1": ["a"], "m2": ["a", "b"]}, {"a": 2, "b": 2})
    assert out["m1"] == [TP("a", 0)]
    assert out["m2"] == [TP("a", 1), TP("b", 0), TP("b", 1)]


def test_unknown_topics_are_skipped() -> None:
    for assign in ASSIGNORS.values():
        assert assign({"m1": ["missing", "t"]}, {"t": 1}, {}) == {"m1": [TP("t", 0)]}


def test_sticky_keeps_partitions_when_a_member_joins_or_leaves() -> None:
    subs = {"m1": ["t"], "m2": ["t"], "m3": ["t"]}
    first = sticky_assign(subs, {"t": 6}, {})
    joined = sticky_assign({**subs, "m4": ["t"]}, {"t": 6}, first)
    moved = sum(1 for tp, m in owners(joined).items() if owners(first)[tp] != m)
    assert moved == 1 and len(joined["m4"]) == 1       # the minimum: one partition for the newcomer
    left = sticky_assign({"m1": ["t"], "m2": ["t"]}, {"t": 6}, first)
    assert all(tp in left[m] for m in ("m1", "m2") for tp in first[m])   # survivors keep theirs
    assert sorted(len(v) for v in left.values()) == [3, 3]


def test_sticky_drops_partitions_of_unsubscribed_topics() -> None:
    previous = {"m1": [TP("a", 0), TP("b", 0)]}
    assert sticky_assign({"m1": ["a"]}, {"a": 1, "b": 1}, previous) == {"m1": [TP("a", 0)]}


def test_the_coordinator_serves_exactly_the_assignors_a_consumer_may_list():
    assert ASSIGNORS.keys() == ASSIGNOR_NAMES
