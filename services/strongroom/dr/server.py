"""The DR service's gRPC server: `DrService` (Status), health and reflection, as the members serve
them. Health service "" and "strongroom.v1.DrService" are SERVING while the service runs (it exits
when shipping stops for good: the sites hold different histories)."""

from __future__ import annotations

from collections.abc import Sequence

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from strongroom.api.v1 import dr_pb2, dr_pb2_grpc
from strongroom.channels import SERVER_OPTIONS
from strongroom.dr.shipper import Shipper
from strongroom.reflection import enable_reflection

__all__ = ["SERVICE", "DrServer"]

SERVICE = dr_pb2.DESCRIPTOR.services_by_name["DrService"].full_name
"""strongroom.v1.DrService"""


class _DrServicer(dr_pb2_grpc.DrServiceServicer):
    def __init__(self, cluster: str, shipper: Shipper, primary: Sequence[str], standby: Sequence[str]) -> None:
        self.cluster = cluster
        self.shipper = shipper
        self.primary = list(primary)
        self.standby = list(standby)

    async def Status(self, request: dr_pb2.DrStatusRequest, context: grpc.aio.ServicerContext) -> dr_pb2.DrStatus:  # type: ignore[type-arg]
        st = self.shipper.status()
        return dr_pb2.DrStatus(
            cluster=self.cluster, primary=self.primary, standby=self.standby,
            primary_commit_index=st.primary_commit_index, standby_last_index=st.standby_last_index,
            entries_behind=st.entries_behind, seconds_behind=st.seconds_behind, primary_member=st.primary_member,
            reconnects=st.reconnects, restarts=st.restarts, state="shipping")


class DrServer:
    """`DrService` on `listen`."""

    def __init__(self, listen: str, cluster: str, shipper: Shipper, primary: Sequence[str],
                 standby: Sequence[str]) -> None:
        self.listen = listen
        self._servicer = _DrServicer(cluster, shipper, primary, standby)
        self._server: grpc.aio.Server | None = None
        self._health: health.aio.HealthServicer | None = None

    async def serve(self) -> int:
        """Bind and serve; the port (OSError when the address cannot be bound)."""
        server = grpc.aio.server(options=SERVER_OPTIONS)
        dr_pb2_grpc.add_DrServiceServicer_to_server(self._servicer, server)
        health_servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        enable_reflection([SERVICE, health.SERVICE_NAME], server)
        port = server.add_insecure_port(self.listen)
        if port == 0:
            await server.stop(None)
            raise OSError(f"cannot listen on {self.listen}")
        await server.start()
        for name in ("", SERVICE):
            await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
        self._server, self._health = server, health_servicer
        return port

    async def close(self, grace: float = 1.0) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace)
