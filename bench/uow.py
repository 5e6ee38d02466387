"""The `uow` workload group (issue 20): units of work of 10 × 1 KiB messages beside plain
confirmed and pipelined publishes, on one fresh 3-member disk-sync cluster, in one run.

In order:

- `confirm`: sequential confirmed publishes (`StrongroomTarget.confirm`): one publish's latency,
  and what 10 of them one after the other take (the same 10 messages sent without a UOW);
- `uow_commit`: one whole UOW at a time through `UnitOfWork.commit()` (one request, open + 10
  messages + COMMIT: one log entry, on the `SendBatchStream` the client shares per
  destination): the sender's commit latency;
- `pipelined`: one pipelined publisher, 256 in flight (`StrongroomTarget.pipelined`);
- `uow_pipelined`: whole UOWs through one `UowSender`, 64 in flight, as many messages as
  `pipelined`: UOWs/s and messages/s;
- `uow_receive`: the receiver side, draining `uow_pipelined`'s UOWs one at a time: receive,
  then commit (processed); UOWs/s and the latency of each call.

The targets (issue 20): UOW commit p50 at most 1.3× one confirmed publish's p50, and messages/s
through UOWs with 64 in flight at least 0.8× the pipelined publisher's.
"""

from __future__ import annotations

import time
from typing import Any

from bench.common import BODY, WARMUP_MESSAGES, Params, percentile, ratio_of

__all__ = ["UOW_CONFIG", "UOW_FIGURES", "UOW_MESSAGES", "UOW_RATIOS", "UOW_WINDOW", "headline", "run_uow",
           "uow_counts", "uow_ratios"]

UOW_CONFIG = "uow"
UOW_MESSAGES = 10  # messages per UOW, 1 KiB each
UOW_WINDOW = 64    # UOWs in flight through the UowSender

# figure key -> (label, unit, higher is better)
UOW_FIGURES: dict[str, tuple[str, str, bool]] = {
    "confirm.p50_ms": ("confirmed publish p50", "ms", False),
    "confirm.p99_ms": ("confirmed publish p99", "ms", False),
    "confirm.x10_p50_ms": (f"{UOW_MESSAGES} confirmed publishes in a row p50", "ms", False),
    "uow_commit.uows_per_s": ("UOW commit (1 in flight)", "UOWs/s", True),
    "uow_commit.p50_ms": ("UOW commit p50", "ms", False),
    "uow_commit.p99_ms": ("UOW commit p99", "ms", False),
    "pipelined.msgs_per_s": ("pipelined publishes (256 in flight)", "msgs/s", True),
    "uow_pipelined.uows_per_s": (f"UOWs pipelined ({UOW_WINDOW} in flight)", "UOWs/s", True),
    "uow_pipelined.msgs_per_s": (f"UOWs pipelined ({UOW_WINDOW} in flight)", "msgs/s", True),
    "uow_receive.uows_per_s": ("receive + commit (1 at a time)", "UOWs/s", True),
    "uow_receive.receive_p50_ms": ("receive p50", "ms", False),
    "uow_receive.receive_p99_ms": ("receive p99", "ms", False),
    "uow_receive.commit_p50_ms": ("receiver commit p50", "ms", False),
    "uow_receive.commit_p99_ms": ("receiver commit p99", "ms", False),
    "pipelined.leader_cpu_s_per_1k": ("leader CPU, pipelined publishes", "s/1k msgs", False),
    "uow_pipelined.leader_cpu_s_per_1k": ("leader CPU, UOWs pipelined", "s/1k msgs", False),
    "uow_pipelined.client_cpu_s_per_1k": ("client CPU, UOWs pipelined", "s/1k msgs", False),
    "pipelined.client_cpu_s_per_1k": ("client CPU, pipelined publishes", "s/1k msgs", False),
}

# (figure, against figure, target, higher is better): the ratio of the medians figure / against.
UOW_RATIOS: list[tuple[str, str, float | None, bool]] = [
    ("uow_commit.p50_ms", "confirm.p50_ms", 1.3, False),
    ("uow_commit.p99_ms", "confirm.p99_ms", None, False),
    ("uow_commit.p50_ms", "confirm.x10_p50_ms", None, False),
    ("uow_pipelined.msgs_per_s", "pipelined.msgs_per_s", 0.8, True),
]


def uow_counts(params: Params) -> dict[str, int]:
    """The group's counts from the run's: UOW commits one at a time (1/5 of the confirmed
    publishes, at least 10) and pipelined UOWs (as many messages as `pipelined`)."""
    return {"uow_commit": max(10, params.confirm // 5), "uow_pipelined": max(4, params.pipelined // UOW_MESSAGES)}


def _ms(lat: list[float], q: float) -> float:
    return percentile(lat, q) * 1e3


async def _commit_one(target: Any, dest: str) -> float:
    uow = target.client.unit_of_work(dest)
    for _ in range(UOW_MESSAGES):
        uow.add(BODY)
    s = time.perf_counter()
    result = await uow.commit()
    took = time.perf_counter() - s
    if result.status != "ACCEPTED" or result.messages != UOW_MESSAGES:
        raise RuntimeError(f"uow_commit: {result}")
    return took


async def uow_commit(target: Any, n: int) -> dict[str, Any]:
    """One whole UOW at a time through `UnitOfWork.commit()`, each waiting for its commit."""
    dest = target.dest("uow-commit.queue")
    for _ in range(WARMUP_MESSAGES):
        await _commit_one(target, dest)
    target.progress.begin(f"{target.config} uow_commit", n)
    lat: list[float] = []
    t0 = time.perf_counter()
    for _ in range(n):
        lat.append(await _commit_one(target, dest))
        target.progress.add()
    seconds = time.perf_counter() - t0
    lat.sort()
    return {"uows_per_s": n / seconds, "msgs_per_s": n * UOW_MESSAGES / seconds, "p50_ms": _ms(lat, 50),
            "p99_ms": _ms(lat, 99), "seconds": seconds}


async def uow_pipelined(target: Any, n: int) -> dict[str, Any]:
    """n whole UOWs through one UowSender, UOW_WINDOW in flight, every one committed."""
    dest = target.dest("uow-pipe.queue")
    bodies = [BODY] * UOW_MESSAGES
    warm = target.client.uow_sender(target.dest("uow-warm.queue"), window=UOW_WINDOW)
    await (await warm.send(bodies))  # the stream's first call finds the leader
    await warm.close()
    target.progress.begin(f"{target.config} uow_pipelined", n)
    meter = target._meter()
    sender = target.client.uow_sender(dest, window=UOW_WINDOW)
    t0 = time.perf_counter()
    try:
        futs = []
        for _ in range(n):
            futs.append(await sender.send(bodies))
            target.progress.add()
        await sender.flush()
        seconds = time.perf_counter() - t0
    finally:
        await sender.close()
    for f in futs:
        if f.exception() is not None:
            raise f.exception()  # type: ignore[misc]
        if f.result().status != "ACCEPTED":
            raise RuntimeError(f"uow_pipelined: {f.result()}")
    messages = n * UOW_MESSAGES
    return {"uows_per_s": n / seconds, "msgs_per_s": messages / seconds, "seconds": seconds,
            "streams": sender.streams, **meter.stop(messages)}


async def uow_receive(target: Any, n: int) -> dict[str, Any]:
    """Drain `uow_pipelined`'s n UOWs one at a time: receive it, then commit it."""
    dest = target.dest("uow-pipe.queue")
    target.progress.begin(f"{target.config} uow_receive", n)
    received: list[float] = []
    committed: list[float] = []
    t0 = time.perf_counter()
    for got in range(n):
        s = time.perf_counter()
        uow = await target.client.receive_uow(dest, "bench", wait=30.0)
        m = time.perf_counter()
        if uow is None:
            raise RuntimeError(f"uow_receive: {got} of {n} UOWs, then none for 30 s")
        if len(uow.messages) != UOW_MESSAGES:
            raise RuntimeError(f"uow_receive: a UOW of {len(uow.messages)} messages")
        status = await uow.commit()
        committed.append(time.perf_counter() - m)
        received.append(m - s)
        if status != "PROCESSED":
            raise RuntimeError(f"uow_receive: committed, the UOW is {status}")
        target.progress.add()
    seconds = time.perf_counter() - t0
    received.sort()
    committed.sort()
    return {"uows_per_s": n / seconds, "msgs_per_s": n * UOW_MESSAGES / seconds, "seconds": seconds,
            "receive_p50_ms": _ms(received, 50), "receive_p99_ms": _ms(received, 99),
            "commit_p50_ms": _ms(committed, 50), "commit_p99_ms": _ms(committed, 99)}


async def run_uow(target: Any, params: Params) -> dict[str, Any]:
    """The group's workloads on a started `StrongroomTarget`, in the order of the docstring."""
    counts = uow_counts(params)
    results: dict[str, Any] = {}
    results["confirm"] = await target.confirm(params.confirm)
    results["uow_commit"] = await uow_commit(target, counts["uow_commit"])
    results["pipelined"] = await target.pipelined(params.pipelined, 1)
    results["uow_pipelined"] = await uow_pipelined(target, counts["uow_pipelined"])
    results["uow_receive"] = await uow_receive(target, counts["uow_pipelined"])
    await target.check_leader()
    return results


def uow_ratios(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """UOW_RATIOS over one configuration's summary (medians), with whether each target is met."""
    out = []
    for fig, against, target, higher in UOW_RATIOS:
        ratio, met = ratio_of(summary.get(fig, {}).get("median"), summary.get(against, {}).get("median"), target,
                              higher)
        out.append({"figure": fig, "against": against, "ratio": ratio, "target": target,
                    "higher_is_better": higher, "met": met})
    return out


def headline(results: dict[str, Any]) -> str:
    """One progress line of a round."""
    c, u, p, q, r = (results[k] for k in ("confirm", "uow_commit", "pipelined", "uow_pipelined", "uow_receive"))
    return (f"confirm p50 {c['p50_ms']:.2f} ms; UOW commit p50 {u['p50_ms']:.2f} ms p99 {u['p99_ms']:.2f} ms; "
            f"pipelined {p['msgs_per_s']:,.0f} msgs/s; UOWs pipelined {q['uows_per_s']:,.0f}/s "
            f"({q['msgs_per_s']:,.0f} msgs/s); receive+commit {r['uows_per_s']:,.0f} UOWs/s")
