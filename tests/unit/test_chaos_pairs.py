"""Several faults at once: how pairs are named, drawn and given a cluster that serves both."""

from __future__ import annotations

import pytest

from strongroom.chaos.faults import FAULTS
from strongroom.chaos.pairs import PAIRABLE, Pair, fault_named, merged_spec, random_pairs


def test_a_pair_is_two_different_pairable_faults_and_anything_else_is_refused_by_name() -> None:
    pair = fault_named("kill-leader+lose-unsynced-async")
    assert isinstance(pair, Pair) and pair.first is FAULTS["kill-leader"]
    assert pair.second is FAULTS["lose-unsynced-async"]
    assert fault_named("etcd-down") is FAULTS["etcd-down"]
    for bad in ("kill-leader+kill-leader", "kill-leader+dr", "kill-leader+nope", "a+b+c", "nope"):
        with pytest.raises(KeyError, match="unknown fault"):
            fault_named(bad)


def test_the_cluster_of_a_pair_has_what_each_fault_needs() -> None:
    spec = merged_spec(FAULTS["lose-unsynced-async"].spec, FAULTS["partition-members"].spec)
    assert spec.storage == "disk-async" and spec.fsync_journal and spec.proxy_members
    assert spec.compact_after_entries == 300
    spec = merged_spec(FAULTS["clock-jump"].spec, FAULTS["disk-full-follower"].spec)
    assert spec.clock_shift and spec.tmpfs_mb == 256 and spec.storage == "disk-sync"


def test_pairs_are_drawn_with_the_seed_from_the_pairable_faults() -> None:
    assert random_pairs(4, 7) == random_pairs(4, 7)
    assert random_pairs(4, 7) != random_pairs(4, 8)
    drawn = random_pairs(30, 1)
    assert len(set(drawn)) == 30
    for name in drawn:
        a, b = name.split("+")
        assert a != b and a in PAIRABLE and b in PAIRABLE
    assert "dr" not in PAIRABLE and "disk-full" not in PAIRABLE
