"""A persistence member's servers: gRPC (client API, maps, replication, admin, health,
reflection v1 and v1alpha) and the replication link, wired to one `PersistenceNode`.

    server, port = await create_server(config, realm, version)
    ...
    await server.stop(grace=2)

`create_server` binds first, so the addresses the member registers (`config.address`,
`config.link_address`) are the ones it listens on, then builds the node, starts serving and
joins the election.
"""

from __future__ import annotations

import gc
import logging
import socket
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from strongroom.api.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    messaging_pb2,
    messaging_pb2_grpc,
    replication_pb2,
    replication_pb2_grpc,
    uow_pb2,
    uow_pb2_grpc,
)
from strongroom.channels import add_port, new_server
from strongroom.observability.member import MemberTelemetry
from strongroom.persistence.config import MemberConfig
from strongroom.persistence.generations import GenerationInterceptor, partner_metadata
from strongroom.persistence.k8s import install_leader_label
from strongroom.persistence.link import LinkServer, bind
from strongroom.persistence.map_servicer import MapServicer
from strongroom.persistence.node import PersistenceNode
from strongroom.persistence.admin_servicer import AdminServicer
from strongroom.persistence.servicer import MessagingServicer, ReplicationServicer
from strongroom.persistence.shared_standby import shared_view
from strongroom.realm.model import Realm
from strongroom.reflection import enable_reflection
from strongroom.security.guard import Guard
from strongroom.uow.servicer import UowServicer

__all__ = ["MemberServer", "add_messaging_service", "create_server", "link_host"]

log = logging.getLogger("strongroom.persistence")

SERVICES = [
    messaging_pb2.DESCRIPTOR.services_by_name["MessagingService"].full_name,
    replication_pb2.DESCRIPTOR.services_by_name["ReplicationService"].full_name,
    admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name,
    messaging_pb2.DESCRIPTOR.services_by_name["MapService"].full_name,
    uow_pb2.DESCRIPTOR.services_by_name["UowService"].full_name,
]
"""The member's own services (health reports each of them)."""
MESSAGING_SERVICE = SERVICES[0]

_UNSPECIFIED_HOSTS = ("", "0.0.0.0", "::", "[::]")


def link_host(listen: str, advertise: str | None, replication_listen: str | None) -> str:
    """The host peers reach the replication link on when no replication_advertise is given:
    the advertise host, else the link's own listen host, else the listen host. A wildcard
    (0.0.0.0, ::) is nobody's address: ValueError, so the member does not register one that no
    leader can reach (a registered link is never bypassed)."""
    if advertise:
        host = advertise.rsplit(":", 1)[0]
    else:
        host = (replication_listen or listen).rsplit(":", 1)[0]
    if host in _UNSPECIFIED_HOSTS:
        raise ValueError(f"the replication link would be advertised at {host or 'no host'!r}, which peers "
                         "cannot reach: give --replication-advertise (or --advertise)")
    return host


class MemberServer:
    """A running member: its node and its servers."""

    def __init__(self, node: PersistenceNode, server: grpc.aio.Server, health_servicer: health.aio.HealthServicer,
                 link: LinkServer | None, telemetry: MemberTelemetry) -> None:
        self.node = node
        self.telemetry = telemetry
        """Its metrics endpoint and statistics log."""
        self.config = node.config
        """The member's configuration, its addresses filled in."""
        self._server = server
        self._health = health_servicer
        self._link = link
        self.port = 0
        """The gRPC port it listens on."""

    async def _set_health(self, status: health_pb2.HealthCheckResponse.ServingStatus.ValueType) -> None:
        for name in ("", *SERVICES):
            await self._health.set(name, status)

    def again(self) -> MemberConfig:
        """The configuration to start this member again with in the same process (scrub.py): on
        the ports it listens on now, not on new free ones, so peers and clients find it where
        it was. Asked before `stop`."""
        config = self.config
        host = config.listen.rsplit(":", 1)[0]
        config = replace(config, listen=f"{host}:{self.port}", metrics_listen=self.telemetry.listen)
        if self._link is not None:
            link = config.replication_listen.rsplit(":", 1)[0] if config.replication_listen else host
            config = replace(config, replication_listen=f"{link}:{self._link.port}")
        return config

    async def stop(self, grace: float = 2.0) -> None:
        """Leave the cluster cleanly (step down, resign) and stop serving within `grace` seconds."""
        await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        if self._link is not None:
            await self._link.stop()
        await self.node.stop()
        await self._server.stop(grace=grace)
        await self.telemetry.stop()


def _passing_bytes(serialize: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    def serialized(response: Any) -> bytes:
        return response if response.__class__ is bytes else serialize(response)

    return serialized


class _Handlers:
    """Takes what a generated `add_…_to_server` registers, to register it changed."""

    def __init__(self) -> None:
        self.handlers: dict[str, grpc.RpcMethodHandler] = {}

    def add_generic_rpc_handlers(self, _handlers: object) -> None:
        pass

    def add_registered_method_handlers(self, _service: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        self.handlers.update(handlers)


def add_messaging_service(servicer: MessagingServicer, server: grpc.aio.Server) -> None:
    """Register `MessagingService` as the generated code does, except that `Subscribe` writes a
    response given as bytes as it is: its deliveries are encoded from the stored messages
    (`servicer.subscribe_answer`)."""
    taken = _Handlers()
    messaging_pb2_grpc.add_MessagingServiceServicer_to_server(servicer, taken)
    handlers = dict(taken.handlers)
    subscribe = handlers["Subscribe"]
    handlers["Subscribe"] = subscribe._replace(response_serializer=_passing_bytes(subscribe.response_serializer))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(MESSAGING_SERVICE, handlers),))
    server.add_registered_method_handlers(MESSAGING_SERVICE, handlers)


def _bind(config: MemberConfig, server: grpc.aio.Server) -> tuple[MemberConfig, int, socket.socket | None]:
    """Bind the gRPC port and the link's; the configuration with the addresses to register."""
    advertised_link_host = ""
    if config.replication_link and not config.replication_advertise:
        advertised_link_host = link_host(config.listen, config.advertise, config.replication_listen)
    port = add_port(server, config.listen)
    if port == 0:
        raise OSError(f"cannot listen on {config.listen}")
    host = config.listen.rsplit(":", 1)[0]
    address = config.advertise or f"{host}:{port}"
    link_socket = None
    link_address = ""
    if config.replication_link:
        link_socket, link_port = bind(config.replication_listen or f"{host}:0")
        link_address = config.replication_advertise or f"{advertised_link_host}:{link_port}"
    return replace(config, address=address, link_address=link_address), port, link_socket


async def create_server(config: MemberConfig, realm: Realm, realm_version: int) -> tuple[MemberServer, int]:
    """Bind, build the member, start serving and join the election; return the running member
    and its gRPC port. ValueError for an unusable address, UnknownMember if the realm does not
    list the member (nothing is left open then)."""
    generations = GenerationInterceptor()
    server = new_server(interceptors=[generations])
    config, port, link_socket = _bind(config, server)
    telemetry = MemberTelemetry(config)
    try:
        config = telemetry.bind()
        node = PersistenceNode(config, realm, realm_version)
    except Exception:
        if link_socket is not None:
            link_socket.close()
        await server.stop(None)
        await telemetry.stop()
        raise
    generations.site = node.site  # the node exists once the ports are bound
    generations.partner = partner_metadata(config.partner)
    link = LinkServer(link_socket, node.follower.handle_append, config.cluster, config.member) \
        if link_socket is not None else None
    guard = Guard(lambda: node.realm, node.tokens)
    add_messaging_service(MessagingServicer(node.messaging, guard), server)
    replication_pb2_grpc.add_ReplicationServiceServicer_to_server(
        ReplicationServicer(node.follower, node, config.cluster, guard), server)
    admin_pb2_grpc.add_AdminServiceServicer_to_server(
        AdminServicer(node, guard, shared_view(config), telemetry.prepare(node), node.messaging.store_of), server)
    messaging_pb2_grpc.add_MapServiceServicer_to_server(MapServicer(node.maps, guard), server)
    uow_pb2_grpc.add_UowServiceServicer_to_server(
        UowServicer(node.uows, node.uows.publications, node.messaging.named, guard, node.messaging.store_of),
        server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    enable_reflection([*SERVICES, health.SERVICE_NAME], server)
    # In a pod (the chart sets POD_NAME/POD_NAMESPACE) the leader labels itself for the leader Service.
    install_leader_label(node)
    await server.start()
    if link is not None:
        await link.start()
    await node.start()
    telemetry.attach(node)
    member = MemberServer(node, server, health_servicer, link, telemetry)
    member.port = port
    await member._set_health(health_pb2.HealthCheckResponse.SERVING)
    log.info("member %s of cluster %s listening on %s, replication link %s (storage %s, driver %s), metrics %s",
             config.member, config.cluster, config.address, config.link_address or "off (appends over gRPC)",
             node.storage_mode.value, node.replica.driver, config.metrics_url or "off")
    # What exists once the member is up lives as long as the process: out of every later
    # collection.
    gc.collect()
    gc.freeze()
    return member, port
