"""The gRPC side of a shared store's standby (`shared_standby.py` is the domain): the check of
the partner, the standby's own answers while it does not serve, and `stand_by`, which runs an
instance of a shared store up to the moment it holds the store's lock.

While the standby waits, it listens on its own address so that clients and tools get an answer:

- `AdminService.Status`: the cluster and member, role follower, the standard as leader while it
  answers, and `shared_store` (run mode standby, what it does, the handshake's values);
- every other call: `NOT_LEADER` naming the standard (trailing metadata `strongroom-leader`,
  as any member that does not lead) while the standard answers its checks, otherwise
  `NOT_OPERATIONAL` (UNAVAILABLE, retriable; metadata `partner` and `state`): the standby is
  taking the store over, the same address serves once it is done.

Once the lock is ours the standby's server stops and the member's own server binds the same
address (`server.create_server`).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from collections.abc import Callable
from typing import Any

import grpc

from strongroom.api.v1 import admin_pb2 as apb
from strongroom.api.v1 import admin_pb2_grpc as agrpc
from strongroom.channels import add_port, connecting_within, new_server, open_channel
from strongroom.errors import NotLeaderError, NotOperational, StrongroomError
from strongroom.grpcerrors import abort_with
from strongroom.persistence.config import MemberConfig
from strongroom.persistence.shared_standby import (
    Identity,
    PartnerView,
    RunMode,
    SharedView,
    Standby,
    StoreLock,
    take_as_standard,
)
from strongroom.realm.model import SharedStore

__all__ = ["AdminOnlyHandler", "probe_partner", "shared_store_reply", "stand_by"]

log = logging.getLogger("strongroom.shared_standby")

_STATUS = "/strongroom.v1.AdminService/Status"


def shared_store_reply(view: SharedView) -> apb.SharedStoreStatus:
    """The API's SharedStoreStatus of an instance's view."""
    ident = view.identity
    return apb.SharedStoreStatus(run_mode=view.run_mode.value, partner_address=view.partner, store_id=ident.store_id,
                                 log_format=ident.log_format, version=ident.version, security=ident.security,
                                 state=view.state, control_interval_seconds=view.control_interval)


async def probe_partner(address: str, timeout: float) -> PartnerView | None:
    """The partner's shared-store status (None: it did not answer within `timeout`)."""
    # The whole timeout for the connection too: a busy standard is not a silent one.
    async with open_channel(address, connecting_within(timeout)) as channel:
        try:
            reply = await agrpc.AdminServiceStub(channel).Status(apb.StatusRequest(), timeout=timeout)  # type: ignore[no-untyped-call]
        except grpc.RpcError:
            return None
    shared = reply.shared_store
    return PartnerView(shared.run_mode if reply.HasField("shared_store") else "",
                       Identity(reply.cluster, reply.member, shared.store_id, shared.log_format, shared.version,
                                shared.security))


class AdminOnlyHandler(grpc.GenericRpcHandler):  # type: ignore[misc]
    """Every call to an instance that serves administration only (a standby that does not
    serve, a store migration's instance): `AdminService.Status` from `status`, every other call
    refused with the error `refusal` gives at that moment."""

    def __init__(self, status: Callable[[], apb.ClusterStatus], refusal: Callable[[], StrongroomError]) -> None:
        self.status = status
        self.refusal = refusal

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        if details.method == _STATUS:
            return grpc.unary_unary_rpc_method_handler(self._status, request_deserializer=apb.StatusRequest.FromString,
                                                       response_serializer=apb.ClusterStatus.SerializeToString)
        # Streaming both ways fits every kind of call: it refuses before reading anything.
        return grpc.stream_stream_rpc_method_handler(self._refuse)

    async def _status(self, request: apb.StatusRequest, context: grpc.aio.ServicerContext) -> apb.ClusterStatus:  # type: ignore[type-arg]
        return self.status()

    async def _refuse(self, requests: Any, context: grpc.aio.ServicerContext) -> None:  # type: ignore[type-arg]
        await abort_with(context, self.refusal())


def standby_refusal(sb: Standby) -> StrongroomError:
    """What a client call to a standby that does not serve gets now."""
    if sb.standard_answers:
        return NotLeaderError(f"this instance of {sb.cluster}/{sb.member} is the standby of a shared store; "
                              f"the standard at {sb.partner} serves", sb.member, sb.partner)
    return NotOperational(f"this instance of {sb.cluster}/{sb.member} is the standby of a shared store and not "
                          f"operational: {sb.state}", {"partner": sb.partner, "state": sb.state})


def standby_status(sb: Standby) -> apb.ClusterStatus:
    """A standby's answer to Status."""
    # Synced: a standby lost nothing it acknowledged (it acknowledges nothing; the store it takes
    # over holds everything the standard confirmed).
    reply = apb.ClusterStatus(cluster=sb.cluster, member=sb.member, role="follower",
                              member_role=apb.MEMBER_ROLE_FOLLOWER, synced=True)
    if sb.standard_answers:
        reply.leader, reply.leader_address = sb.member, sb.partner
    reply.shared_store.CopyFrom(shared_store_reply(sb.view()))
    return reply


async def stand_by(config: MemberConfig, shared: SharedStore, run_mode: RunMode) -> tuple[MemberConfig, StoreLock]:
    """Run an instance of a shared store until it holds the store's lock: at once for the
    standard (StoreLocked when the partner holds it), after the control loop for a standby
    (HandshakeFailed when the partner is not its standard on this store). Returns the
    configuration to serve with (its run mode, now standard, and partner filled in) and the lock,
    to keep for the life of the process. ValueError when the instance's address is not one of
    the realm's `shared_store.instances`."""
    own = config.advertise or config.listen
    if own not in shared.instances:
        raise ValueError(f"cluster {config.cluster} has a shared store at {', '.join(shared.instances)}; this instance "
                         f"listens at {own}: start it with --listen (or --advertise) at one of them")
    partner = next(a for a in shared.instances if a != own)
    config = replace(config, partner=partner, control_interval=shared.control_interval_seconds,
                     run_mode=RunMode.STANDARD.value)
    lock = StoreLock(config.data_dir)
    if run_mode is RunMode.STANDARD:
        take_as_standard(lock, own)
        log.info("standard of %s/%s: holds the store's lock in %s; partner %s", config.cluster, config.member,
                 config.data_dir, partner)
        lock.ensure_store_id()
        return config, lock
    standby = Standby(config.cluster, config.member, config.data_dir, own, partner, shared.control_interval_seconds,
                      probe_partner, lock)
    server = new_server()
    server.add_generic_rpc_handlers((AdminOnlyHandler(lambda: standby_status(standby),
                                                        lambda: standby_refusal(standby)),))
    if add_port(server, config.listen) == 0:
        raise OSError(f"cannot listen on {config.listen}")
    await server.start()
    print(f"STANDBY {own}", flush=True)
    log.info("standby of %s/%s at %s: checking the standard at %s every %g s", config.cluster, config.member, own,
             partner, shared.control_interval_seconds)
    try:
        await standby.run()
    finally:
        await server.stop(None)
    lock.ensure_store_id()
    log.warning("standby of %s/%s: holds the store's lock; restoring the store and switching to standard",
                config.cluster, config.member)
    return config, lock
