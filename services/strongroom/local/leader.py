"""Finding a cluster's leader from its members' own answers: one rule for every tool.

The launcher, the drills, the chaos suite, the test harness and the benchmarks ask the same
question: which member of cluster X serves as leader now (optionally: one other than the
member just killed, or of a newer epoch than the one just faulted), and wait for one up to a
timeout. Each asks `AdminService.Status` of the member addresses it knows, concurrently; a
member that answers with role "leader" and its name is a candidate, and when two claim to lead
(an old leader that has not yet noticed it lost its lease) the one of the highest epoch is the
leader. A leader that is excluded, not newer than asked, or whose status the caller does not
accept yet (`accept`: e.g. it has not committed its whole log, or serves another DR generation)
counts as no leader yet: the caller waits for another to take over.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import grpc

from strongroom.api.v1 import admin_pb2, admin_pb2_grpc
from strongroom.channels import open_channel

__all__ = [
    "Leader",
    "MemberReply",
    "NoLeader",
    "fetch_statuses",
    "find_leader",
    "member_status",
    "wait_for_leader",
]

Addresses = Sequence[str] | Callable[[], Sequence[str]]
"""Member addresses to ask, or a function giving them anew for every round (members that are
restarted, paused or killed while the caller waits)."""


@dataclass
class MemberReply:
    """One member's answer to Status, or why it gave none."""

    endpoint: str
    status: admin_pb2.ClusterStatus | None
    error: str = ""


async def _status_one(endpoint: str, timeout: float) -> MemberReply:
    try:
        async with open_channel(endpoint, []) as channel:
            stub = admin_pb2_grpc.AdminServiceStub(channel)
            reply = await stub.Status(admin_pb2.StatusRequest(), timeout=timeout)
            return MemberReply(endpoint, reply)
    except grpc.RpcError as exc:
        code = exc.code() if isinstance(exc, grpc.aio.AioRpcError) else None
        return MemberReply(endpoint, None, f"{code.name if code else 'ERROR'}: {_rpc_details(exc)}")


def _rpc_details(exc: grpc.RpcError) -> str:
    details = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
    return details or ""


async def fetch_statuses(endpoints: Sequence[str], timeout: float = 2.0) -> list[MemberReply]:
    """AdminService.Status of every endpoint, concurrently; unreachable members carry an error."""
    return list(await asyncio.gather(*(_status_one(ep, timeout) for ep in endpoints)))


async def member_status(endpoint: str, timeout: float = 2.0) -> admin_pb2.ClusterStatus | None:
    """One member's Status, or None when it does not answer within `timeout` seconds."""
    return (await _status_one(endpoint, timeout)).status


@dataclass(frozen=True)
class Leader:
    """The member serving as leader, as it describes itself."""

    member: str
    """Its name in the realm."""
    address: str
    """The address it answered on (one of those asked)."""
    epoch: int
    status: admin_pb2.ClusterStatus
    """Its whole Status answer."""


class NoLeader(TimeoutError):
    """No member served as leader (of the kind asked for) within the timeout."""


async def find_leader(addresses: Sequence[str], exclude: Collection[str] = (), newer_than: int = 0,
                      status_timeout: float = 1.0,
                      accept: Callable[[admin_pb2.ClusterStatus], bool] | None = None) -> Leader | None:
    """The leader among the members at `addresses` now, or None.

    None also when the leader is named in `exclude`, its epoch is not above `newer_than`, or
    `accept` (given) says no to its status. Each member has `status_timeout` seconds to answer.
    """
    best: Leader | None = None
    for reply in await fetch_statuses(addresses, timeout=status_timeout):
        st = reply.status
        if st is None or st.role != "leader" or not st.member:
            continue
        if best is None or st.epoch > best.epoch:
            best = Leader(member=str(st.member), address=reply.endpoint, epoch=int(st.epoch), status=st)
    if best is None or best.member in exclude or best.epoch <= newer_than:
        return None
    if accept is not None and not accept(best.status):
        return None
    return best


async def wait_for_leader(addresses: Addresses, timeout: float, *, exclude: Collection[str] = (),
                          newer_than: int = 0, interval: float = 0.1, status_timeout: float = 1.0,
                          each_round: Callable[[], None] | None = None,
                          accept: Callable[[admin_pb2.ClusterStatus], bool] | None = None) -> Leader:
    """Ask every `interval` seconds until `find_leader` names one; NoLeader after `timeout` s.

    `each_round`, called before every round, may raise to stop waiting (a member process
    exited) or report progress.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if each_round is not None:
            each_round()
        found = await find_leader(addresses() if callable(addresses) else addresses, exclude, newer_than,
                                  status_timeout, accept)
        if found is not None:
            return found
        await asyncio.sleep(interval)
    raise NoLeader(f"no leader within {timeout:.0f} s")
