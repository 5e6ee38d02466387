"""The router-to-router calls over gRPC: the interest exchange and Forward streams to a
neighbour's router, at the address the realm gives it (one channel per neighbour).

Failures come out as `StrongroomError`s, read by the client's one table (`error_from_rpc`).
A call answered NOT_ACTIVE_ROUTER drops the neighbour's channel, so the next call opens a new
connection: behind a Kubernetes Service (the chart's router Service selects the pod the active
replica labelled) a connection stays with the pod it first reached, also after that replica
stopped being active, and only a new connection reaches the one that is active now.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc

from strongroom.aio import cancelled_under_us
from strongroom.api.v1 import router_pb2 as rpb
from strongroom.api.v1 import router_pb2_grpc as rgrpc
from strongroom.channels import CHANNEL_OPTIONS, open_channel, outdated, retire
from strongroom.client.retry import error_from_rpc
from strongroom.errors import InvalidArgument, NotActiveRouter, StrongroomError

__all__ = ["EXCHANGE_TIMEOUT", "GrpcForwardLink", "GrpcLinks"]

EXCHANGE_TIMEOUT = 2.0
"""Seconds an interest exchange may take."""
LINK_OPTIONS = [*CHANNEL_OPTIONS, ("grpc.use_local_subchannel_pool", 1)]
"""A channel of its own connections: gRPC otherwise shares one connection among the channels to
an address, and a new channel would reuse the connection to the replica that refused."""


FORWARD = "/strongroom.v1.RouterService/Forward"
"""The Forward method, called with batches given encoded (`GrpcForwardLink.send`)."""


class GrpcForwardLink:
    """One Forward stream to a neighbour's router."""

    def __init__(self, call: grpc.aio.StreamStreamCall[bytes, rpb.ForwardAck], address: str,
                 on_error: Callable[[StrongroomError], None] | None = None) -> None:
        self._call = call
        self._address = address
        self._on_error = on_error

    def _error(self, exc: grpc.RpcError) -> StrongroomError:
        error = error_from_rpc(exc, self._address)
        if self._on_error is not None:
            self._on_error(error)
        return error

    def _cut(self) -> bool:
        """After a CancelledError out of the call: True when the stream was cancelled under the
        route (its channel closed: a NOT_ACTIVE_ROUTER answer dropped it), not the route's task
        stopping. A broken stream, which the session ends on and resumes from the marks; taken
        for the task's own cancellation, it would leave the writer waiting for answers that
        never come."""
        return self._call.cancelled() and cancelled_under_us()

    async def send(self, batch: bytes | rpb.ForwardBatch) -> None:
        """Write a batch: an encoded `ForwardBatch` (as a route builds it, `strongroom.wire`),
        or the message."""
        try:
            await self._call.write(batch if isinstance(batch, bytes) else batch.SerializeToString())
        except grpc.RpcError as exc:
            raise self._error(exc) from None
        except asyncio.InvalidStateError:
            raise error_from_rpc(_ended(self._address), self._address) from None
        except asyncio.CancelledError:
            if self._cut():
                raise error_from_rpc(_ended(self._address), self._address) from None
            raise

    async def receive(self) -> rpb.ForwardAck | None:
        """The next answer; None when the stream ended cleanly."""
        try:
            ack = await self._call.read()
        except grpc.RpcError as exc:
            raise self._error(exc) from None
        except asyncio.CancelledError:
            if self._cut():
                raise error_from_rpc(_ended(self._address), self._address) from None
            raise
        return ack if isinstance(ack, rpb.ForwardAck) else None

    def close(self) -> None:
        """End the stream."""
        self._call.cancel()


class GrpcLinks:
    """Channels to the neighbours' routers; `address_of(neighbour)` reads the realm in force."""

    def __init__(self, address_of: Callable[[str], str]) -> None:
        self._address_of = address_of
        self._channels: dict[str, tuple[str, grpc.aio.Channel]] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def _stub(self, neighbour: str) -> tuple[str, grpc.aio.Channel, rgrpc.RouterServiceStub]:
        address = self._address_of(neighbour)
        if not address:
            raise InvalidArgument(f"cluster {neighbour!r} has no router address in the realm")
        held = self._channels.get(neighbour)
        if held is not None and outdated(held[1]):
            # The process's certificate was renewed: a new connection presents the new one;
            # the Forward stream open on the old one runs on until it ends.
            del self._channels[neighbour]
            retire(held[1])
            held = None
        if held is None or held[0] != address:
            held = self._channels[neighbour] = (address, open_channel(address, LINK_OPTIONS))
        return address, held[1], rgrpc.RouterServiceStub(held[1])  # type: ignore[no-untyped-call]

    def _failed(self, neighbour: str, channel: grpc.aio.Channel, error: StrongroomError) -> None:
        """A replica that is not the active router answered: the next call gets a new channel
        (a new connection), and this one is closed once its calls had time to end."""
        if not isinstance(error, NotActiveRouter):
            return
        held = self._channels.get(neighbour)
        if held is None or held[1] is not channel:
            return  # dropped already
        del self._channels[neighbour]
        task = asyncio.get_running_loop().create_task(channel.close(grace=EXCHANGE_TIMEOUT))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def exchange(self, neighbour: str, request: rpb.InterestExchange) -> rpb.InterestExchange:
        """One interest exchange with the neighbour's router."""
        address, channel, stub = self._stub(neighbour)
        try:
            answer: rpb.InterestExchange = await stub.ExchangeInterest(request, timeout=EXCHANGE_TIMEOUT)
        except grpc.RpcError as exc:
            error = error_from_rpc(exc, address)
            self._failed(neighbour, channel, error)
            raise error from None
        return answer

    async def open_forward(self, neighbour: str) -> GrpcForwardLink:
        """A new Forward stream to the neighbour's router."""
        address, channel, _ = self._stub(neighbour)

        def failed(error: StrongroomError) -> None:
            self._failed(neighbour, channel, error)

        forward = channel.stream_stream(FORWARD, request_serializer=None,
                                        response_deserializer=rpb.ForwardAck.FromString)
        return GrpcForwardLink(forward(), address, failed)

    async def close(self) -> None:
        """Close every channel."""
        channels, self._channels = list(self._channels.values()), {}
        for _, ch in channels:
            await ch.close()
        await asyncio.gather(*self._closing, return_exceptions=True)  # those dropped before


class _Ended(grpc.RpcError):
    def __init__(self, address: str) -> None:
        self._address = address

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.CANCELLED

    def details(self) -> str:
        return f"the Forward stream to {self._address} ended"


def _ended(address: str) -> grpc.RpcError:
    return _Ended(address)
