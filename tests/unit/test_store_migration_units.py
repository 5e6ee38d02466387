"""Store migration's pure parts (docs/store-operations.md, "Migration: unload and load"): the
handshake's comparison, the counts' comparison, the loader's refusals, and the PSTORE report's
lines, file names, parsing and record-by-record comparison."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.persistence import migration as mig
from strongroom.persistence import pstore_report as rep

UNLOAD = mig.Side("pstore-unload", "h1:1971", "h2:1972", "1.0", 6, "rocksdb", ("h1:1:10",), "c", "m1", "/a")
LOAD = mig.Side("pstore-load", "h2:1972", "h1:1971", "1.0", 6, "sqlite", ("h2:1:20",), "c", "m1", "/b")


def test_a_matching_pair_has_no_problem_either_way() -> None:
    assert mig.handshake_problems(UNLOAD, LOAD) == []
    assert mig.handshake_problems(LOAD, UNLOAD) == []


@pytest.mark.parametrize(("change", "words"), [
    ({"run_mode": "pstore-unload"}, "both instances run in mode pstore-unload"),
    ({"version": "2.0"}, "migrate with the same version on both sides"),
    ({"log_format": 7}, "log format"),
    ({"partner": "h9:1"}, "given h9:1 as its partner"),
    ({"address": "h2:9999"}, "h2:9999"),
    ({"member": "m2"}, "pair the instances of one member"),
    ({"cluster": "other"}, "pair the instances of one member"),
    ({"fingerprints": ("h1:1:10",)}, "both instances point at the same store"),
])
def test_each_difference_is_a_problem_seen_from_both_sides(change: dict[str, object], words: str) -> None:
    load = replace(LOAD, **change)  # type: ignore[arg-type]
    for problems in (mig.handshake_problems(UNLOAD, load), mig.handshake_problems(load, UNLOAD)):
        assert any(words in p for p in problems), problems


def test_counts_name_every_family_that_differs() -> None:
    a, b = mig.Counts(), mig.Counts()
    for counts in (a, b):
        counts.add("db", "log", b"k1", b"v1", 3)
        counts.add("db", "meta", b"x", b"y", 0)
    assert a.differences(b) == [] and (a.records, a.bytes, a.elements) == (2, 6, 3)
    b.add("db", "log", b"k2", b"v", 1)
    a.add("checkpoints/00000000000000000100", "log", b"k", b"v", 0)
    diff = a.differences(b)
    assert len(diff) == 2
    assert diff[0].startswith("db/log: unload 1 records, 4 bytes, 3 messages; load 2 records, 7 bytes, 4 messages")
    assert diff[1].startswith("checkpoints/00000000000000000100/log: unload 1 records")


def test_the_loader_refuses_what_no_unload_sends(tmp_path: Path) -> None:
    loader = mig.Loader(tmp_path / "new", "sqlite")
    with pytest.raises(ValueError, match="before its database was named"):
        loader.put("log", b"k", b"v", 0)
    with pytest.raises(ValueError, match="unknown database"):
        loader.open("../elsewhere", ["log"])
    with pytest.raises(ValueError, match="unknown database"):
        loader.open("checkpoints/../../x", ["log"])
    loader.open("db", ["log", "meta"])
    with pytest.raises(ValueError, match="family 'state_msg'"):
        loader.put("state_msg", b"k", b"v", 0)
    loader.put("log", b"k", b"v", 0)
    loader.open("checkpoints/00000000000000000007", ["log"])
    with pytest.raises(ValueError, match="sent twice"):
        loader.open("checkpoints/00000000000000000007", ["log"])
    loader.finish()
    assert (loader.counts.records, loader.counts.bytes) == (1, 2)


def test_an_empty_or_missing_directory_takes_a_load_and_a_store_does_not(tmp_path: Path) -> None:
    assert mig.load_problems(tmp_path / "missing") == []
    (tmp_path / "empty").mkdir()
    assert mig.load_problems(tmp_path / "empty") == []
    loader = mig.Loader(tmp_path / "full", "sqlite")
    loader.open("db", ["log"])
    loader.finish()
    assert "already holds a store" in mig.load_problems(tmp_path / "full")[0]
    assert "holds no persistent store" in mig.unload_problems(tmp_path / "empty")[0]
    (tmp_path / "full" / "rollback").mkdir()
    assert "a roll back is under way" in mig.unload_problems(tmp_path / "full")[0]


def _entry(*ops: rpb.Operation) -> bytes:
    return rpb.LogEntry(index=1, epoch=1, ops=list(ops)).SerializeToString()


def test_records_are_typed_and_their_messages_counted() -> None:
    batch = rpb.Operation(publish_batch=rpb.PublishBatchOp(messages=[cpb.Message(body=b"a"), cpb.Message(body=b"b")]))
    uow = rpb.Operation(uow=rpb.UowOp(messages=[cpb.Message(body=b"u")] * 3))
    assert rep.classify("log", _entry(batch)) == (rep.PUBLICATION, 2)
    assert rep.classify("log", _entry(uow, batch)) == (rep.UNIT_OF_WORK, 5)
    assert rep.classify("log", _entry(rpb.Operation(ack=rpb.AckOp(message_seqs=[1])))) == (rep.SUBSCRIPTION, 0)
    assert rep.classify("log", _entry(rpb.Operation(noop=rpb.Noop()))) == (rep.CLUSTER, 0)
    assert rep.classify("meta", b"\x00") == (rep.MASTER, 0)
    assert rep.classify("state_msg", b"x") == (rep.PUBLICATION, 1)
    assert rep.classify("state_pending", b"x") == (rep.SUBSCRIPTION, 0)


def test_identifiers_are_unique_and_fit_their_column() -> None:
    assert rep.identifier("db", "log", (23).to_bytes(8, "big")) == "db:log:0000000000000017"
    assert rep.identifier("db", "meta", b"commit_index") == "db:meta:commit_index"
    assert rep.identifier("checkpoints/00000000000000000100", "log", (1).to_bytes(8, "big")) == \
        "cp100:log:0000000000000001"
    long_a, long_b = rep.identifier("db", "state_msg", b"q" * 80 + b"a"), rep.identifier("db", "state_msg", b"q" * 80 + b"b")
    assert long_a != long_b and len(long_a) <= 44 and "#" in long_a
    assert rep.identifier("db", "meta", b"a b\x00") == "db:meta:a~206200"
    assert rep.identifier("db", "meta", b"snapshot@" + (200).to_bytes(8, "big")) == "db:meta:snapshot@~00000000000000C8"
    assert rep.identifier("db", "state_dedup", b"\x01\x02") == "db:state_dedup:~0102"


def test_a_report_reads_back_and_two_compare_record_by_record(tmp_path: Path) -> None:
    entry = _entry(rpb.Operation(publish_batch=rpb.PublishBatchOp(messages=[cpb.Message(body=b"a")] * 5)))
    first, second = tmp_path / "PSTORE.REPORT.UNLOAD", tmp_path / "PSTORE.REPORT.LOAD"
    for path, action in ((first, "Unloaded"), (second, "Loaded")):
        writer = rep.ReportWriter(path, "1.0", "c", "m1")
        for i in range(130):  # three pages
            writer.add("db", "log", i.to_bytes(8, "big"), entry, action)
        writer.add("db", "meta", b"commit_index", b"\x00" * 8, action)
        writer.close()
    text = first.read_text()
    assert text.count("PSTORE Report  cluster c member m1") == 3 and "Page 3" in text and "\f" in text
    assert max(len(line) for line in text.splitlines()) <= 121
    lines = rep.read_report(first)
    assert len(lines) == 131
    assert (lines[0].identifier, lines[0].elements, lines[0].length, lines[0].record_type, lines[0].action) == \
        ("db:log:0000000000000000", 5, 8 + len(entry), "Publication", "Unloaded")
    assert rep.compare_reports(lines, rep.read_report(second)).equal
    # A record missing on one side, and one that differs, are named.
    changed = [*rep.read_report(second)[1:-1], replace(lines[-1], length=9)]
    cmp = rep.compare_reports(lines, changed)
    assert not cmp.equal and [x.identifier for x in cmp.only_first] == ["db:log:0000000000000000"]
    assert [a.identifier for a, _ in cmp.different] == ["db:meta:commit_index"]
    bad = tmp_path / "bad"
    bad.write_text("not a report line at all, no columns\n")
    with pytest.raises(ValueError, match=f"{bad}:1"):
        rep.read_report(bad)


def test_the_report_file_follows_the_option_then_the_environment_then_the_default(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(rep.ENV, raising=False)
    assert rep.report_path(None, "LOAD", "c", "m1") == Path("PSTORE.REPORT.c.m1.LOAD")
    monkeypatch.setenv(rep.ENV, "/tmp/from-env")
    assert rep.report_path(None, "UNLOAD", "c", "m1") == Path("/tmp/from-env")
    assert rep.report_path("given.txt", "UNLOAD", "c", "m1") == Path("given.txt")
