"""gRPC servicer of a persistence member's `AdminService`: a thin adapter over the member.

Reads (status, durable lists, origin marks, the persistent store, traces) need the permission
`browse`, changes (step-down, durable delete, DR demotion, store operations, tracing)
`administer`, when the realm enables auth (`strongroom.security.guard`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import grpc

from strongroom.api.v1 import admin_pb2 as apb
from strongroom.api.v1 import admin_pb2_grpc as agrpc
from strongroom.dr.record import DrRecord
from strongroom.errors import InvalidArgument, NotOperational, PersistenceUnavailable, StrongroomError
from strongroom.etcd import EtcdUnavailable
from strongroom.grpcerrors import abort_with
from strongroom.observability.traceswitch import MessageTracing
from strongroom.persistence.replies import add_durables, add_origin_marks, status_reply, store_reply
from strongroom.persistence.shared_standby import SharedView
from strongroom.persistence.standby_server import shared_store_reply
from strongroom.persistence.state import DeleteResult
from strongroom.persistence.status import ClusterStatus, DurableList, OriginMarkStatus
from strongroom.persistence.storestate import StoreAction, StoreView
from strongroom.security.access import Action
from strongroom.security.guard import Guard

__all__ = ["AdminServicer"]

Context = grpc.aio.ServicerContext  # type: ignore[type-arg]


class StoreOperations(Protocol):
    """The persistent store's state, as operators read and change it (`PStore`)."""

    def view(self) -> StoreView: ...

    async def read(self, cluster: str) -> StoreView: ...

    async def change(self, cluster: str, action: StoreAction, reason: str = "") -> StoreView: ...


class Administered(Protocol):
    """What the operator API needs of a member (`PersistenceNode`)."""

    @property
    def pstore(self) -> StoreOperations: ...

    def status(self) -> ClusterStatus: ...

    def is_leader_role(self) -> bool: ...

    async def step_down_and_resign(self, pause: float = 3.0) -> None: ...

    async def delete_durable(self, destination: str, name: str, content: bool) -> DeleteResult: ...

    def list_durables(self, store: str, destination: str) -> DurableList: ...

    def list_origin_marks(self, store: str, destination: str) -> list[OriginMarkStatus]: ...

    async def demote(self, cluster: str) -> tuple[DrRecord, int]: ...


class AdminServicer(agrpc.AdminServiceServicer):
    """Operator API."""

    def __init__(self, member: Administered, guard: Guard, shared: Callable[[], SharedView] | None = None,
                 tracing: MessageTracing | None = None, store_of: Callable[[str], str] | None = None) -> None:
        self.member = member
        self._store_of = store_of or (lambda destination: "")
        self.guard = guard
        """Who may call what (`browse` to read, `administer` to change: security/guard.py)."""
        self.shared = shared
        """A shared store's standard: its view for `Status` (None for other members)."""
        self.tracing = tracing
        """The member's message tracing (None: not served here)."""

    async def _require_on(self, context: Context, action: Action, store: str = "", destination: str = "") -> None:
        """`action` on the store named, or the store of the destination named, or the whole realm."""
        access = await self.guard.caller(context)
        if access is None:
            return
        try:
            if not store and destination:
                store = self._store_of(destination)
            access.check(action, store or None)
        except StrongroomError as err:
            await abort_with(context, err)

    async def Status(self, request: apb.StatusRequest, context: Context) -> apb.ClusterStatus:
        await self.guard.require(context, Action.BROWSE)
        reply = status_reply(self.member.status())
        reply.persistent_store.CopyFrom(store_reply(self.member.pstore.view()))
        if self.shared is not None:
            reply.shared_store.CopyFrom(shared_store_reply(self.shared()))
        return reply

    async def StepDown(self, request: apb.StepDownRequest, context: Context) -> apb.StepDownResponse:
        await self.guard.require(context, Action.ADMINISTER)
        was = self.member.is_leader_role()
        if was:
            await self.member.step_down_and_resign()
        return apb.StepDownResponse(stepped_down=was)

    async def DeleteDurable(self, request: apb.DeleteDurableRequest, context: Context) -> apb.DeleteDurableResponse:
        await self._require_on(context, Action.ADMINISTER, destination=request.destination)
        try:
            result = await self.member.delete_durable(request.destination, request.durable, request.content)
        except StrongroomError as err:
            await abort_with(context, err)
        return apb.DeleteDurableResponse(store=result.store, released_messages=result.released)

    async def ListDurables(self, request: apb.ListDurablesRequest, context: Context) -> apb.ListDurablesResponse:
        await self._require_on(context, Action.BROWSE, request.store, request.destination)
        try:
            listed = self.member.list_durables(request.store, request.destination)
        except StrongroomError as err:
            await abort_with(context, err)
        reply = apb.ListDurablesResponse(clock=listed.clock)
        add_durables(reply.durables, listed.durables)
        return reply

    async def ListOriginMarks(self, request: apb.ListOriginMarksRequest,
                              context: Context) -> apb.ListOriginMarksResponse:
        await self._require_on(context, Action.BROWSE, request.store, request.destination)
        try:
            marks = self.member.list_origin_marks(request.store, request.destination)
        except StrongroomError as err:
            await abort_with(context, err)
        reply = apb.ListOriginMarksResponse()
        add_origin_marks(reply.marks, marks)
        return reply

    async def Demote(self, request: apb.DemoteRequest, context: Context) -> apb.DemoteResponse:
        await self.guard.require(context, Action.ADMINISTER)
        try:
            record, last = await self.member.demote(request.cluster)
        except StrongroomError as err:
            await abort_with(context, err)
        return apb.DemoteResponse(cluster=request.cluster, generation=record.generation,
                                  since_index=record.since_index, primary=list(record.peer), last_index=last)

    async def GetPersistentStore(self, request: apb.GetPersistentStoreRequest,
                                 context: Context) -> apb.PersistentStore:
        await self.guard.require(context, Action.BROWSE)
        try:
            view = await self.member.pstore.read(request.cluster)
        except StrongroomError as err:
            await abort_with(context, err)
        return store_reply(view)

    async def _change_store(self, request: apb.ChangePersistentStoreRequest, action: StoreAction,
                            context: Context) -> apb.PersistentStore:
        await self.guard.require(context, Action.ADMINISTER)
        try:
            if not request.cluster:
                raise InvalidArgument("cluster is required (the cluster whose persistent store to change)")
            view = await self.member.pstore.change(request.cluster, action, request.reason)
        except StrongroomError as err:
            await abort_with(context, err)
        return store_reply(view)

    async def DisconnectPersistentStore(self, request: apb.ChangePersistentStoreRequest,
                                        context: Context) -> apb.PersistentStore:
        return await self._change_store(request, StoreAction.DISCONNECT, context)

    async def ConnectPersistentStore(self, request: apb.ChangePersistentStoreRequest,
                                     context: Context) -> apb.PersistentStore:
        return await self._change_store(request, StoreAction.CONNECT, context)

    async def AllowNewUnitsOfWork(self, request: apb.ChangePersistentStoreRequest,
                                  context: Context) -> apb.PersistentStore:
        return await self._change_store(request, StoreAction.ALLOW_NEW, context)

    async def SetMessageTrace(self, request: apb.SetMessageTraceRequest,
                              context: Context) -> apb.MessageTraceSettings:
        await self.guard.require(context, Action.ADMINISTER)
        try:
            if self.tracing is None:
                raise NotOperational("this instance does not trace messages")
            try:
                settings = await self.tracing.change(request.destination, request.producer_id, request.seconds,
                                                     request.off)
            except (EtcdUnavailable, grpc.aio.AioRpcError) as exc:
                raise PersistenceUnavailable(f"cannot reach etcd to change the message trace: {exc}") from None
        except StrongroomError as err:
            await abort_with(context, err)
        return apb.MessageTraceSettings(filters=[apb.MessageTraceFilter(destination=f.destination,
                                                                        producer_id=f.producer_id, until=f.until)
                                                 for f in settings.filters])

    async def GetMessageTrace(self, request: apb.GetMessageTraceRequest,
                              context: Context) -> apb.GetMessageTraceResponse:
        await self.guard.require(context, Action.BROWSE)
        reply = apb.GetMessageTraceResponse(member=self.member.status().member)
        if self.tracing is not None:
            for e in self.tracing.tracer.events(request.destination, request.producer_id, request.sequence,
                                                request.store, request.message_seq, request.limit or 1000):
                reply.steps.add(time=e.time, member=e.member, step=e.step, destination=e.destination,
                                producer_id=e.producer_id, sequence=e.sequence, store=e.store,
                                message_seq=e.message_seq, log_index=e.log_index, detail=e.detail,
                                traceparent=e.traceparent)
        return reply
