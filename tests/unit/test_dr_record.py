"""The DR record and generations (dr/record.py): epochs carry the generation in their high bits,
so every epoch of a newer generation is above every epoch of an older one whatever the two sites'
etcd revisions; only a primary is fenced, and only by a newer primary; the record round-trips."""

from __future__ import annotations

import pytest

from strongroom.dr.record import (
    GENERATION_SHIFT,
    DrRecord,
    DrRole,
    default_record,
    epoch_of,
    generation_of,
    superseded,
)


def test_a_newer_generation_orders_above_any_revision_of_an_older_one() -> None:
    old_site_late = epoch_of(0, (1 << GENERATION_SHIFT) - 1)
    new_site_early = epoch_of(1, 1)
    assert new_site_early > old_site_late
    assert generation_of(new_site_early) == 1 and generation_of(old_site_late) == 0
    assert epoch_of(0, 1234) == 1234  # generation 0: the epochs before generations existed
    assert epoch_of(3, 7) & ((1 << GENERATION_SHIFT) - 1) == 7


def test_a_revision_that_reaches_the_generation_bits_is_refused() -> None:
    with pytest.raises(ValueError):
        epoch_of(0, 1 << GENERATION_SHIFT)


def test_only_a_primary_is_fenced_and_only_by_a_newer_primary() -> None:
    primary = DrRecord(DrRole.PRIMARY, generation=2)
    assert superseded(primary, DrRole.PRIMARY, 3)
    assert not superseded(primary, DrRole.PRIMARY, 2)
    assert not superseded(primary, DrRole.PRIMARY, 1)
    assert not superseded(primary, DrRole.STANDBY, 5)
    assert not superseded(primary, DrRole.FENCED, 5)
    assert not superseded(DrRecord(DrRole.STANDBY, generation=0), DrRole.PRIMARY, 1)
    assert not superseded(DrRecord(DrRole.FENCED, generation=0, newer_generation=1), DrRole.PRIMARY, 2)


def test_the_realms_default_gives_each_set_its_role_and_the_other_sites_addresses() -> None:
    standby = default_record(True, ["a:1", "a:2"], [])
    assert standby.role is DrRole.STANDBY and standby.peer == ("a:1", "a:2") and standby.generation == 0
    primary = default_record(False, ["a:1"], ["b:1", "b:2"])
    assert primary.role is DrRole.PRIMARY and primary.peer == ("b:1", "b:2")
    assert primary.revision == 0 and primary.changed_at == 0


def test_a_record_round_trips_without_its_revision() -> None:
    record = DrRecord(DrRole.FENCED, generation=1, peer=("b:1",), newer_generation=2, since_index=0,
                      changed_at=12.5, reason="superseded")
    back = DrRecord.from_bytes(record.to_bytes(), revision=42)
    assert back == record and back.revision == 42
    assert b"revision" not in record.to_bytes()
    assert "superseded by generation 2" in back.describe()
    changed = record.changed(role=DrRole.STANDBY, generation=2)
    assert changed.role is DrRole.STANDBY and changed.changed_at > record.changed_at


def test_the_generation_in_metadata_both_ways() -> None:
    from strongroom.client.connection import Connection
    from strongroom.client.retry import RetryPolicy
    from strongroom.grpcerrors import GENERATION_METADATA_KEY as KEY
    from strongroom.persistence.generations import generation_in

    assert generation_in(None) == 0 and generation_in([("other", "3")]) == 0
    assert generation_in([("other", "x"), (KEY, "7")]) == 7
    assert generation_in([(KEY, "seven")]) == 0  # not a number: as if none was named

    conn = Connection("127.0.0.1:1", RetryPolicy())
    assert conn.generation == 0 and conn.metadata is None  # nothing sent before one was seen
    conn.learn_generation([(KEY, "0")])
    assert conn.metadata is None
    conn.learn_generation([(KEY, "2")])
    conn.learn_generation([(KEY, "1")])  # an older site's answer does not lower it
    conn.learn_generation([(KEY, "bad")])
    assert conn.generation == 2 and conn.metadata == ((KEY, "2"),)
