"""The router-to-router calls over gRPC: the interest exchange and Forward streams to a
neighbour's router, at the address the realm gives it (one channel per neighbour).

Failures come out as `StrongroomError`s, read by the client's one table (`error_from_rpc`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc

from strongroom.api.v1 import router_pb2 as rpb
from strongroom.api.v1 import router_pb2_grpc as rgrpc
from strongroom.channels import CHANNEL_OPTIONS
from strongroom.client.retry import error_from_rpc
from strongroom.errors import InvalidArgument

__all__ = ["EXCHANGE_TIMEOUT", "GrpcForwardLink", "GrpcLinks"]

EXCHANGE_TIMEOUT = 2.0
"""Seconds an interest exchange may take."""


class GrpcForwardLink:
    """One Forward stream to a neighbour's router."""

    def __init__(self, call: grpc.aio.StreamStreamCall[rpb.ForwardBatch, rpb.ForwardAck], address: str) -> None:
        self._call = call
        self._address = address

    async def send(self, batch: rpb.ForwardBatch) -> None:
        """Write a batch."""
        try:
            await self._call.write(batch)
        except grpc.RpcError as exc:
            raise error_from_rpc(exc, self._address) from None
        except asyncio.InvalidStateError:
            raise error_from_rpc(_ended(self._address), self._address) from None

    async def receive(self) -> rpb.ForwardAck | None:
        """The next answer; None when the stream ended cleanly."""
        try:
            ack = await self._call.read()
        except grpc.RpcError as exc:
            raise error_from_rpc(exc, self._address) from None
        return ack if isinstance(ack, rpb.ForwardAck) else None

    def close(self) -> None:
        """End the stream."""
        self._call.cancel()


class GrpcLinks:
    """Channels to the neighbours' routers; `address_of(neighbour)` reads the realm in force."""

    def __init__(self, address_of: Callable[[str], str]) -> None:
        self._address_of = address_of
        self._channels: dict[str, tuple[str, grpc.aio.Channel]] = {}

    def _stub(self, neighbour: str) -> tuple[str, rgrpc.RouterServiceStub]:
        address = self._address_of(neighbour)
        if not address:
            raise InvalidArgument(f"cluster {neighbour!r} has no router address in the realm")
        held = self._channels.get(neighbour)
        if held is None or held[0] != address:
            held = self._channels[neighbour] = (address, grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS))
        return address, rgrpc.RouterServiceStub(held[1])  # type: ignore[no-untyped-call]

    async def exchange(self, neighbour: str, request: rpb.InterestExchange) -> rpb.InterestExchange:
        """One interest exchange with the neighbour's router."""
        address, stub = self._stub(neighbour)
        try:
            answer: rpb.InterestExchange = await stub.ExchangeInterest(request, timeout=EXCHANGE_TIMEOUT)
        except grpc.RpcError as exc:
            raise error_from_rpc(exc, address) from None
        return answer

    async def open_forward(self, neighbour: str) -> GrpcForwardLink:
        """A new Forward stream to the neighbour's router."""
        address, stub = self._stub(neighbour)
        return GrpcForwardLink(stub.Forward(), address)

    async def close(self) -> None:
        """Close every channel."""
        channels, self._channels = list(self._channels.values()), {}
        for _, ch in channels:
            await ch.close()


class _Ended(grpc.RpcError):
    def __init__(self, address: str) -> None:
        self._address = address

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.CANCELLED

    def details(self) -> str:
        return f"the Forward stream to {self._address} ended"


def _ended(address: str) -> grpc.RpcError:
    return _Ended(address)
