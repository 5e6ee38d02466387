"""What a member counts as it works, for its metrics (`observability.member`) and its statistics
log (`observability.statslog`).

Plain integers and fixed-bucket histograms, incremented where the work happens (the state
machine's apply, the dispatcher's deliveries, the group commit, the storage's log writes, the
replicators) and read when Prometheus scrapes or the statistics line is written. They depend on
nothing and take no lock: every increment runs on the member's event loop thread, and the
exporter reads them there too (`exporter.MetricsServer`), so a read never meets a half-done one.
One `Tallies` lives as long as its member process (the `Replica` owns it and hands it to each
state machine it makes), which is what Prometheus expects of a counter: it only goes down when
the process restarts.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from strongroom.observability.msgtrace import MessageTracer

__all__ = ["COMMIT_BUCKETS", "ROUND_BUCKETS", "Histogram", "Tallies"]

COMMIT_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
"""Seconds: a log write takes 0.1 ms (memory) to tens of ms (a busy disk); a commit, a round trip
more; a second and more is a member in trouble."""
ROUND_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
"""Operations in one group-commit round (a round carries at most the cluster's max_batch_ops)."""


class Histogram:
    """Observations in fixed buckets, as Prometheus's histogram counts them: bucket i holds the
    values at most `bounds[i]` and above the bound before it; the last one, those above every
    bound (exported cumulative, with `+Inf`)."""

    __slots__ = ("bounds", "counts", "count", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, count of values at most le) per bound and +Inf: Prometheus's buckets."""
        out: list[tuple[str, int]] = []
        total = 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += n
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), total))
        return out

    def quantile(self, q: float, since: Histogram | None = None) -> float:
        """An estimate of the q-quantile (0 < q < 1) of the values observed, or of those observed
        after `since` (an earlier `copy()` of this one): the upper bound of the bucket it falls
        in, as Prometheus's histogram_quantile would read it at worst. 0.0 with no value."""
        counts = self.counts if since is None else [a - b for a, b in zip(self.counts, since.counts, strict=True)]
        total = sum(counts)
        if total == 0:
            return 0.0
        rank = q * total
        seen = 0
        for i, n in enumerate(counts):
            seen += n
            if seen >= rank and n:
                return self.bounds[i] if i < len(self.bounds) else self.bounds[-1]
        return self.bounds[-1]

    def copy(self) -> Histogram:
        other = Histogram(self.bounds)
        other.counts = list(self.counts)
        other.count = self.count
        other.sum = self.sum
        return other


DurableId = tuple[str, str, str]
"""(store, destination, durable name; "" for a queue's own durable)."""


class Tallies:
    """A member's counters since its process started."""

    def __init__(self) -> None:
        # The state machine's apply (every member counts what it applies).
        self.stored: Counter[str] = Counter()
        """Messages stored, per store (published, forwarded here, dead letters' copies)."""
        self.acked: Counter[str] = Counter()
        """Messages a durable's acknowledgment released, per store (one per durable that acked)."""
        self.expired: Counter[str] = Counter()
        """Messages whose time-to-live or retention ended, per store."""
        self.discarded: Counter[str] = Counter()
        """Messages a limit with discard_oldest removed, per store."""
        self.dead_lettered: Counter[str] = Counter()
        """Messages moved out of a durable past its redelivery limit (or terminated), per store."""
        self.producers_forgotten = 0
        """Producers' deduplication windows forgotten after the cluster's idle expiry."""
        # The leader's dispatcher.
        self.deliveries: Counter[DurableId] = Counter()
        """Messages sent to subscribers, per durable (first deliveries and redeliveries)."""
        self.redeliveries: Counter[DurableId] = Counter()
        """Of those, the deliveries of a message delivered before (its delivery count above 1)."""
        # The group commit and the log's storage.
        self.commit_seconds = Histogram(COMMIT_BUCKETS)
        """Per group-commit round of the leader: from the round's entry made to its commit (a
        majority stored it)."""
        self.round_operations = Histogram(ROUND_BUCKETS)
        """Operations per group-commit round of the leader."""
        self.log_write_seconds = Histogram(COMMIT_BUCKETS)
        """Per write of log entries to this member's storage (with its fsync in disk-sync)."""
        # Replication.
        self.snapshots_sent: Counter[str] = Counter()
        """Snapshots this member sent as leader, per follower."""
        self.snapshots_installed = 0
        """Snapshots this member installed from a leader."""
        self.backtracks: Counter[str] = Counter()
        """Appends a follower refused for a log that did not match, per follower: the leader
        went back to find where they agree."""
        self.catchups = 0
        """Times this member finished catching up (it had started without the cluster's state:
        an empty disk, or a store moved aside)."""
        # Message tracing (observability/msgtrace.py).
        self.tracer: MessageTracer | None = None
        """The recorder of traced messages' steps while a trace filter is on, else None (every
        hook tests this first)."""
