"""The DR service's gRPC server: `DrService` (Status, Activate), health and reflection, as the
members serve them. Health service "" and "strongroom.v1.DrService" are SERVING while the service
runs (it exits when shipping stops for good: the sites hold different histories)."""

from __future__ import annotations

import asyncio

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from strongroom.api.v1 import dr_pb2, dr_pb2_grpc
from strongroom.channels import add_port, new_server
from strongroom.dr.control import DrControl
from strongroom.errors import StrongroomError, UnknownCluster
from strongroom.grpcerrors import abort_with
from strongroom.observability.exporter import MetricsServer, serve_metrics
from strongroom.observability.services import dr_families
from strongroom.realm.model import Realm
from strongroom.reflection import enable_reflection
from strongroom.security.access import Action
from strongroom.security.guard import Guard
from strongroom.security.tokens import TokenBook

__all__ = ["SERVICE", "DrServer", "dr_status"]

SERVICE = dr_pb2.DESCRIPTOR.services_by_name["DrService"].full_name
"""strongroom.v1.DrService"""


def dr_status(cluster: str, control: DrControl, metrics_url: str = "") -> dr_pb2.DrStatus:
    """The DR service's status (`Status`, and its metrics)."""
    st, record = control.status(), control.record
    return dr_pb2.DrStatus(
        cluster=cluster, primary=control.primary_addresses(), standby=control.standby_addresses(),
        primary_commit_index=st.primary_commit_index, standby_last_index=st.standby_last_index,
        entries_behind=st.entries_behind, seconds_behind=st.seconds_behind, primary_member=st.primary_member,
        reconnects=st.reconnects, restarts=st.restarts, state=control.state, role=record.role.value,
        generation=record.generation, peer_role=control.fencer.peer_role if control.fencer else "",
        bytes_shipped=st.bytes_shipped, snapshots_shipped=st.snapshots_shipped, messages_behind=st.messages_behind,
        primary_stored_messages=st.primary_stored_messages, standby_stored_messages=st.standby_stored_messages,
        batches_shipped=st.batches_shipped, acks_behind=st.acks_behind, metrics_url=metrics_url)


class _DrServicer(dr_pb2_grpc.DrServiceServicer):
    def __init__(self, cluster: str, control: DrControl, guard: Guard) -> None:
        self.cluster = cluster
        self.control = control
        self.metrics_url = ""
        self.guard = guard
        """`browse` for the status, `administer` to activate, where the realm enables auth."""

    async def Status(self, request: dr_pb2.DrStatusRequest, context: grpc.aio.ServicerContext) -> dr_pb2.DrStatus:  # type: ignore[type-arg]
        await self.guard.require(context, Action.BROWSE)
        return dr_status(self.cluster, self.control, self.metrics_url)

    async def Activate(self, request: dr_pb2.ActivateRequest,
                       context: grpc.aio.ServicerContext) -> dr_pb2.ActivateResponse:  # type: ignore[type-arg]
        await self.guard.require(context, Action.ADMINISTER)
        try:
            if request.cluster != self.cluster:
                raise UnknownCluster(f"this DR service serves cluster {self.cluster!r}, not {request.cluster!r}")
            loss = await self.control.activate(request.force)
        except StrongroomError as err:
            await abort_with(context, err)
        return dr_pb2.ActivateResponse(
            cluster=loss.cluster, generation=loss.generation, primary_commit_index=loss.primary_commit_index,
            heard_seconds_ago=loss.heard_seconds_ago, standby_last_index=loss.standby_last_index,
            entries_lost_at_least=loss.entries_lost_at_least, exact=loss.exact, leader=loss.leader,
            seconds_to_serve=loss.seconds_to_serve, summary=loss.summary(),
            messages_lost_at_least=loss.messages_lost_at_least, acks_lost_at_least=loss.acks_lost_at_least)


class DrServer:
    """`DrService` on `listen`."""

    def __init__(self, listen: str, cluster: str, control: DrControl, realm: Realm | None = None) -> None:
        self.listen = listen
        # The site's bearer tokens, followed while it serves (`serve`); `realm`: the realm the
        # service started with, whose users and permissions it checks.
        self._tokens = TokenBook(control.etcd) if realm is not None else None
        self._following: asyncio.Task[None] | None = None
        self._servicer = _DrServicer(cluster, control, Guard(lambda: realm, self._tokens))
        self.metrics: MetricsServer | None = None
        """Its metrics endpoint (`serve_metrics`), or None."""
        self._server: grpc.aio.Server | None = None
        self._health: health.aio.HealthServicer | None = None

    async def serve(self) -> int:
        """Bind and serve; the port (OSError when the address cannot be bound)."""
        server = new_server()
        if self._tokens is not None and self._following is None:
            self._following = asyncio.create_task(self._tokens.follow(), name="tokens")
        dr_pb2_grpc.add_DrServiceServicer_to_server(self._servicer, server)
        health_servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        enable_reflection([SERVICE, health.SERVICE_NAME], server)
        port = add_port(server, self.listen)
        if port == 0:
            await server.stop(None)
            raise OSError(f"cannot listen on {self.listen}")
        await server.start()
        for name in ("", SERVICE):
            await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
        self._server, self._health = server, health_servicer
        return port

    def serve_metrics(self, listen: str, site: str) -> str:
        """Start the metrics endpoint (`observability.services.serve_metrics`); its URL, which
        `Status` names from now on."""
        servicer = self._servicer
        self.metrics, servicer.metrics_url = serve_metrics(
            listen, self.listen, lambda: dr_families(dr_status(servicer.cluster, servicer.control), site))
        return servicer.metrics_url

    async def close(self, grace: float = 1.0) -> None:
        if self._following is not None:
            self._following.cancel()
            self._following = None
        if self.metrics is not None:
            self.metrics.stop()
            self.metrics = None
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace)
