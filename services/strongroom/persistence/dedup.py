"""A producer's deduplication window: the last `DEDUP_WINDOW` sequences it stored, each with the
message sequence it was stored as.

Every member holds one window per producer it has seen (until the producer is forgotten for
being idle: `ForgetProducersOp`), so its size per entry is what a cluster with many producers
pays: two machine words per sequence in two `array`s, kept in the order they were recorded
(16 bytes an entry; a dict of Python ints took over 100). Producers send increasing sequences,
so the arrays are sorted and a lookup is a binary search. A sequence that arrives below the
highest one seen (a producer that went back) turns on a dict index for that window from then on:
the answers are the same either way, only the memory differs.

What a window answers is part of the replicated state machine: every member must decide a
sequence alike, so the rules below (record order, eviction of the oldest recorded, "too old"
below the highest minus the window) are those of every earlier log format.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterator

__all__ = ["DEDUP_WINDOW", "ProducerWindow"]

DEDUP_WINDOW = 65536
"""Sequences per producer remembered for deduplication. A sequence older than the window cannot
be judged any more: it is refused (neither stored nor reported as a duplicate)."""
_COMPACT_AFTER = 8192
"""Evicted entries kept at the head of the arrays before they are cut off (one memmove per
this many records)."""


class ProducerWindow:
    """One producer's window (see the module)."""

    __slots__ = ("_index", "_msgs", "_seqs", "_start", "last_index", "last_used", "max_seq")

    def __init__(self, last_index: int = 0, last_used: float = 0.0) -> None:
        self.max_seq = 0
        self._seqs = array("Q")
        """Sequences in the order recorded; the window is `[_start:]`."""
        self._msgs = array("Q")
        """The message sequence each was stored as, alongside."""
        self._start = 0
        self._index: dict[int, int] | None = None
        """sequence -> message sequence, once the sequences are not increasing (else None)."""
        self.last_index = last_index
        """The log index of the entry that last took a sequence (ForgetProducersOp.before_index
        is compared with it, so every member decides alike). Set before `record`, which a
        state on disk writes it with."""
        self.last_used = last_used
        """The pseudo-clock when it last took a sequence (the leader's idle test)."""

    def __len__(self) -> int:
        return len(self._seqs) - self._start

    def items(self) -> Iterator[tuple[int, int]]:
        """(sequence, message sequence) of the window, oldest recorded first."""
        return zip(*self.columns())

    def columns(self) -> tuple[array[int], array[int]]:
        """The window's sequences and their message sequences, oldest recorded first (copies:
        a snapshot's two repeated fields)."""
        start = self._start
        return self._seqs[start:], self._msgs[start:]

    def lookup(self, sequence: int) -> int | None:
        """The message sequence stored for this id, -1 if too old to tell, None if new."""
        if sequence > self.max_seq:
            return None  # the common case: the producer's next one
        index = self._index
        if index is not None:
            found = index.get(sequence)
            if found is not None:
                return found
        else:
            seqs = self._seqs
            at = bisect_left(seqs, sequence, self._start)
            if at < len(seqs) and seqs[at] == sequence:
                return self._msgs[at]
        if self.max_seq and sequence + DEDUP_WINDOW <= self.max_seq:
            return -1
        return None

    def record(self, sequence: int, message_seq: int) -> None:
        """`sequence` was stored as `message_seq` (it was new: `lookup` said None)."""
        index = self._index
        if sequence > self.max_seq:
            self.max_seq = sequence
        elif index is None and len(self._seqs) > self._start:
            index = self._index = dict(self.items())
        self._seqs.append(sequence)
        self._msgs.append(message_seq)
        if index is not None:
            index[sequence] = message_seq
        if len(self._seqs) - self._start > DEDUP_WINDOW:
            if index is not None:
                index.pop(self._seqs[self._start], None)
            self._start += 1
            if self._start >= _COMPACT_AFTER:
                del self._seqs[:self._start]
                del self._msgs[:self._start]
                self._start = 0
