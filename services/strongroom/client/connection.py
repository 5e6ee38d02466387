"""The client's connection to one persistence cluster: the members' addresses, one gRPC channel
per member, which member leads, the highest DR generation seen, and the one loop that runs a
call against the leader through redirects and outages (`call_leader`, under the client's
`RetryPolicy`).

A shared store's standard names its partner in the same metadata (`strongroom-partner`): the
client adds it to the endpoints, so it follows a takeover by the standby by itself.

The generation: every answer of the client API names the answering site's DR generation
(metadata `strongroom-generation`), and every call names the highest one seen, so an old primary
that was superseded without hearing of it refuses this client's writes (FENCED) instead of
forking the history the client saw continue at the newer primary (persistence/generations.py).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import grpc

from strongroom.aio import cancelled_under_us
from strongroom.api.v1 import admin_pb2_grpc
from strongroom.api.v1 import messaging_pb2_grpc as mgrpc
from strongroom.channels import CHANNEL_OPTIONS, kept_channel, open_channel
from strongroom.client.retry import Outage, RetryPolicy, error_from_rpc
from strongroom.errors import (
    ConnectionFailed,
    InvalidArgument,
    NoLeaderError,
    NotLeaderError,
    PersistenceUnavailable,
    StrongroomError,
)
from strongroom.grpcerrors import GENERATION_METADATA_KEY, PARTNER_METADATA_KEY

__all__ = ["Connection", "parse_endpoints"]

T = TypeVar("T")

def parse_endpoints(endpoints: str | Sequence[str]) -> list[str]:
    """Member addresses from "host:port,host:port" or a list; blanks dropped."""
    items = endpoints.split(",") if isinstance(endpoints, str) else list(endpoints)
    return [e.strip() for e in items if e.strip()]


class Connection:
    """Channels to the members of one cluster and what the client knows of its leader."""

    def __init__(self, endpoints: str | Sequence[str], policy: RetryPolicy, token: str | None = None) -> None:
        self.token = token
        """The bearer token every call carries (None: the process's, if it has one)."""
        self.endpoints = parse_endpoints(endpoints)
        if not self.endpoints:
            raise InvalidArgument("no endpoints given")
        self.policy = policy
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._leader: str | None = None
        self._rotation = itertools.cycle(range(len(self.endpoints)))
        self.generation = 0
        """The highest DR generation an answer named (0: none yet)."""
        self.metadata: tuple[tuple[str, str], ...] | None = None
        """What every call sends: the generation seen (None until one was)."""
        self._closed = False

    def set_endpoints(self, endpoints: str | Sequence[str]) -> list[grpc.aio.Channel]:
        """The members are now at `endpoints` (a member moved, one was added or removed): later
        calls go there. The leader is forgotten unless it is still among them. Returns the
        channels to addresses no longer listed, for the caller to close."""
        new = parse_endpoints(endpoints)
        if not new:
            raise InvalidArgument("no endpoints given")
        if new == self.endpoints:
            return []
        self.endpoints = new
        self._rotation = itertools.cycle(range(len(new)))
        if self._leader not in new:
            self._leader = None
        return [self._channels.pop(a) for a in list(self._channels) if a not in new]

    def channel(self, address: str) -> grpc.aio.Channel:
        """The channel to one member (opened on first use, and again after a certificate
        renewal; kept until `close`)."""
        if self._closed:
            raise InvalidArgument("the client is closed")
        return kept_channel(self._channels, address, lambda: open_channel(address, CHANNEL_OPTIONS, token=self.token))

    def messaging(self, address: str) -> mgrpc.MessagingServiceStub:
        """A MessagingService stub for one member."""
        return mgrpc.MessagingServiceStub(self.channel(address))  # type: ignore[no-untyped-call]

    def maps(self, address: str) -> mgrpc.MapServiceStub:
        """A MapService stub for one member."""
        return mgrpc.MapServiceStub(self.channel(address))  # type: ignore[no-untyped-call]

    def admin(self, address: str) -> admin_pb2_grpc.AdminServiceStub:
        """An AdminService stub for one member."""
        return admin_pb2_grpc.AdminServiceStub(self.channel(address))  # type: ignore[no-untyped-call]

    def learn_generation(self, metadata: Sequence[tuple[str, Any]] | None) -> None:
        """An answer's metadata: keep the generation it names if it is the highest seen, and
        add the partner it names (a shared store's standard names its standby) to the
        endpoints."""
        for key, value in metadata or ():
            if key == GENERATION_METADATA_KEY:
                try:
                    generation = int(value)
                except (TypeError, ValueError):
                    continue
                if generation > self.generation:
                    self.generation = generation
                    self.metadata = ((GENERATION_METADATA_KEY, str(generation)),)
            elif key == PARTNER_METADATA_KEY:
                self.learn_partner(str(value))

    def learn_partner(self, address: str) -> None:
        """A shared store's standard named its partner (docs/store-operations.md): once the
        standard is gone, the next attempts go there too."""
        if address and address not in self.endpoints:
            self.endpoints = [*self.endpoints, address]
            self._rotation = itertools.cycle(range(len(self.endpoints)))

    async def unary(self, call: grpc.aio.UnaryUnaryCall[Any, T]) -> T:
        """The answer of a unary call made with `metadata`, its generation learnt."""
        response = await call
        self.learn_generation(await call.trailing_metadata())
        return response

    def candidate(self) -> str:
        """Where to send the next call: the known leader, else the next endpoint."""
        if self._leader:
            return self._leader
        return self.endpoints[next(self._rotation)]

    def note_leader(self, address: str) -> None:
        """A call succeeded here: this is the leader."""
        self._leader = address

    def note_failure(self, address: str, err: StrongroomError | None) -> bool:
        """Learn from a call that failed at `address`: follow NOT_LEADER to the leader it names,
        forget a leader that went away. True when the failure named another member as leader
        (the next attempt goes there at once)."""
        if isinstance(err, NotLeaderError) and err.leader_address and err.leader_address != address:
            self._leader = err.leader_address
            return True
        if self._leader == address:
            self._leader = None
        return False

    async def call_leader(self, attempt: Callable[[str], Awaitable[T]], outage: Outage | None = None) -> T:
        """Run `attempt(address)` against the leader until it succeeds, following redirects
        and retrying retriable failures under the retry policy.

        `attempt` fails by raising a `grpc.RpcError` or a `StrongroomError`. A failure that is
        not retriable, or retriable by the caller only (`retried_by_client` false: ORIGIN_GAP, a
        persistent store an operator disconnected), is raised
        at once; one that outlasts the policy's timeout is raised then (a connection failure as
        `NoLeaderError`; a call cancelled by its channel closing under it counts as a
        connection failure). When no member can be reached at all (every
        endpoint refused the connection) for the policy's `unreachable_timeout`, a retriable
        `ConnectionFailed` naming the addresses and why is raised instead, sooner. Nothing but
        `StrongroomError` comes out."""
        outage = outage or self.policy.outage()
        while True:
            address = self.candidate()
            try:
                result = await attempt(address)
            except grpc.RpcError as exc:
                err = error_from_rpc(exc, address)
            except StrongroomError as exc:
                err = exc
            except asyncio.CancelledError:
                if not cancelled_under_us():
                    raise
                if self._closed:  # `close` closed the channel: nothing to retry on
                    raise PersistenceUnavailable("the client was closed before the call was answered; "
                                                 "its outcome is unknown") from None
                # The attempt's channel was closed under it (`set_endpoints` dropped the
                # address, a channel retired): a broken connection, tried again like one.
                err = ConnectionFailed(f"the call to {address} was cancelled: its channel was closed",
                                       {"grpc_code": "CANCELLED", "address": address})
            else:
                self.note_leader(address)
                return result
            if not err.retried_by_client:
                raise err
            outage.failed(address, err)
            if self.note_failure(address, err):
                outage.redirected()
                continue
            unreachable = outage.unreachable_error(self.endpoints)
            if unreachable is not None:
                raise unreachable
            delay = outage.next_delay()
            if delay is None:
                raise outage.unreachable_error(self.endpoints, final=True) or self._gave_up(err)
            await asyncio.sleep(delay)

    def _gave_up(self, err: StrongroomError) -> StrongroomError:
        if isinstance(err, ConnectionFailed):
            return NoLeaderError(f"no leader reachable within {self.policy.timeout:.0f}s: {err}")
        return err

    async def close(self) -> None:
        """Close every channel; later calls are refused (streams still open fail)."""
        self._closed = True
        channels, self._channels = list(self._channels.values()), {}
        for ch in channels:
            await ch.close()
