"""gRPC servicer of `MapService`: a thin adapter over `MapFront`.

Each method calls the map front, maps domain errors through the error table and builds the
reply; validation lives in the front.
"""

from __future__ import annotations

import grpc

from strongroom.api.v1 import messaging_pb2 as mpb
from strongroom.api.v1 import messaging_pb2_grpc as mgrpc
from strongroom.errors import StrongroomError
from strongroom.grpcerrors import abort_with
from strongroom.persistence.maps import MapEntry, MapFront, MapWrite
from strongroom.security.access import Action
from strongroom.security.guard import Guard

__all__ = ["MapServicer"]

Context = grpc.aio.ServicerContext  # type: ignore[type-arg]


def _entry(entry: MapEntry) -> mpb.MapEntry:
    return mpb.MapEntry(key=entry.key, value=entry.value, version=entry.version)


def _write_reply(out: MapWrite) -> mpb.MapWriteResponse:
    reply = mpb.MapWriteResponse(swapped=out.swapped, found=out.entry is not None, log_index=out.log_index)
    if out.entry is not None:
        reply.entry.CopyFrom(_entry(out.entry))
    return reply


class MapServicer(mgrpc.MapServiceServicer):
    """Replicated key-value maps inside a store."""

    def __init__(self, front: MapFront, guard: Guard) -> None:
        self.front = front
        self.guard = guard
        """Who may call what: a map is a destination of its store, written with `publish`, read
        with `subscribe` (security/guard.py)."""

    async def _may(self, context: Context, action: Action, store: str, name: str) -> None:
        await self.guard.require(context, action, store, name)

    async def Put(self, request: mpb.MapPutRequest, context: Context) -> mpb.MapWriteResponse:
        await self._may(context, Action.PUBLISH, request.store, request.map)
        try:
            out = await self.front.put(request.store, request.map, request.key, request.value)
        except StrongroomError as err:
            await abort_with(context, self.front.named(err))
        return _write_reply(out)

    async def Get(self, request: mpb.MapGetRequest, context: Context) -> mpb.MapGetResponse:
        await self._may(context, Action.SUBSCRIBE, request.store, request.map)
        try:
            entry = await self.front.get(request.store, request.map, request.key)
        except StrongroomError as err:
            await abort_with(context, self.front.named(err))
        if entry is None:
            return mpb.MapGetResponse(found=False)
        return mpb.MapGetResponse(found=True, entry=_entry(entry))

    async def Delete(self, request: mpb.MapDeleteRequest, context: Context) -> mpb.MapWriteResponse:
        await self._may(context, Action.PUBLISH, request.store, request.map)
        try:
            out = await self.front.delete(request.store, request.map, request.key)
        except StrongroomError as err:
            await abort_with(context, self.front.named(err))
        return _write_reply(out)

    async def List(self, request: mpb.MapListRequest, context: Context) -> mpb.MapListResponse:
        await self._may(context, Action.SUBSCRIBE, request.store, request.map)
        try:
            entries, more = await self.front.list(request.store, request.map, request.prefix,
                                                  request.start_after, request.limit)
        except StrongroomError as err:
            await abort_with(context, self.front.named(err))
        return mpb.MapListResponse(entries=[_entry(e) for e in entries], more=more)

    async def CompareAndSet(self, request: mpb.MapCompareAndSetRequest, context: Context) -> mpb.MapWriteResponse:
        await self._may(context, Action.PUBLISH, request.store, request.map)
        try:
            out = await self.front.compare_and_set(request.store, request.map, request.key,
                                                   request.expected_version, request.value, request.delete)
        except StrongroomError as err:
            await abort_with(context, self.front.named(err))
        return _write_reply(out)
