"""A producer's deduplication window (persistence/dedup.py): the same answers as the rules every
log format had (the last DEDUP_WINDOW sequences recorded, the oldest evicted first, "too old"
below the highest minus the window), in a fraction of the memory."""

from __future__ import annotations

import random
import tracemalloc
from collections import deque

import pytest

from strongroom.persistence import dedup
from strongroom.persistence.dedup import DEDUP_WINDOW, ProducerWindow


class Reference:
    """The rules, as the first log formats wrote them: a dict and the record order."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.max_seq = 0
        self.order: deque[int] = deque()
        self.seqs: dict[int, int] = {}
        self.pairs: deque[tuple[int, int]] = deque()
        """What a snapshot writes: (sequence, message sequence) in record order."""

    def lookup(self, sequence: int) -> int | None:
        if sequence in self.seqs:
            return self.seqs[sequence]
        if self.max_seq and sequence + self.window <= self.max_seq:
            return -1
        return None

    def record(self, sequence: int, message_seq: int) -> None:
        self.seqs[sequence] = message_seq
        self.order.append(sequence)
        self.pairs.append((sequence, message_seq))
        self.max_seq = max(self.max_seq, sequence)
        while len(self.order) > self.window:
            self.seqs.pop(self.order.popleft(), None)
            self.pairs.popleft()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("back", [0.0, 0.02, 0.3])
def test_answers_like_the_reference(monkeypatch: pytest.MonkeyPatch, seed: int, back: float) -> None:
    """Increasing producers, producers that go back now and then and ones that jump about: every
    lookup answers as the reference does, through evictions and compactions."""
    monkeypatch.setattr(dedup, "DEDUP_WINDOW", 50)
    monkeypatch.setattr(dedup, "_COMPACT_AFTER", 7)
    rnd = random.Random(seed)
    ours, ref = ProducerWindow(), Reference(50)
    seq, mseq = 0, 0
    for _ in range(3000):
        if rnd.random() < back:
            candidate = max(0, seq - rnd.randrange(0, 120))  # a retry, an old one or one never seen
        else:
            seq += rnd.choice((1, 1, 1, 2, 7))
            candidate = seq
        got, want = ours.lookup(candidate), ref.lookup(candidate)
        assert got == want, (candidate, got, want)
        if want is None:
            mseq += 1
            ours.record(candidate, mseq)
            ref.record(candidate, mseq)
        assert list(ours.items()) == list(ref.pairs)
        assert len(ours) == len(ref.order)
        assert ours.max_seq == ref.max_seq
    for probe in range(seq + 60):
        assert ours.lookup(probe) == ref.lookup(probe), probe


def test_columns_are_the_window_in_record_order() -> None:
    window = ProducerWindow()
    for s in range(1, DEDUP_WINDOW + 101):
        window.record(s, 1000 + s)
    seqs, mseqs = window.columns()
    assert list(seqs) == list(range(101, DEDUP_WINDOW + 101))
    assert list(mseqs) == [1000 + s for s in seqs]
    assert window.lookup(100) == -1 and window.lookup(101) == 1101 and window.lookup(DEDUP_WINDOW + 101) is None


def test_a_full_window_of_an_increasing_producer_is_small() -> None:
    """16 bytes a sequence (plus slack for the evicted head): a dict of ints took 7 MiB for
    these 65,536 entries, which is what a cluster with many producers pays on every member."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        window = ProducerWindow()
        for s in range(1, 2 * DEDUP_WINDOW):
            window.record(s, 10_000_000 + 3 * s)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(window) == DEDUP_WINDOW
    assert held < 1.5 * 2**20, f"a full window holds {held / 2**20:.2f} MiB"
