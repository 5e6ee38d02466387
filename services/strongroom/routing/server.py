"""A router replica's gRPC server: RouterService, health and reflection (as the members serve
them), on the cluster's router address.

A standby replica does not listen there: it binds once elected (`serve`) and lets go when it is
no longer active (`unserve`), so the one address the realm names always reaches the active
router, wherever the replicas run.
"""

from __future__ import annotations

import logging

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from strongroom.api.v1 import router_pb2, router_pb2_grpc
from strongroom.channels import SERVER_OPTIONS
from strongroom.reflection import enable_reflection
from strongroom.routing.router import Router
from strongroom.routing.servicer import RouterServicer

__all__ = ["SERVICE", "RouterServer"]

log = logging.getLogger("strongroom.router")

SERVICE = router_pb2.DESCRIPTOR.services_by_name["RouterService"].full_name
"""strongroom.v1.RouterService"""


class RouterServer:
    """The RouterService of one replica, served while it is the active router."""

    def __init__(self, listen: str) -> None:
        self.listen = listen
        self.router: Router | None = None
        self._server: grpc.aio.Server | None = None
        self.port = 0

    async def serve(self) -> int:
        """Bind the listen address and serve; the port (OSError when it cannot be bound)."""
        assert self.router is not None
        if self._server is not None:
            return self.port
        server = grpc.aio.server(options=[*SERVER_OPTIONS, ("grpc.so_reuseport", 0)])
        router_pb2_grpc.add_RouterServiceServicer_to_server(RouterServicer(self.router), server)
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
        self._server, self.port = server, port
        log.info("router of %s serving on %s", self.router.cluster, self.listen)
        return port

    async def unserve(self, grace: float = 1.0) -> None:
        """Stop serving (the address is free for the next active replica)."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace)

    async def on_active(self, active: bool) -> None:
        """The router's election hook: serve while active."""
        if active:
            await self.serve()
        else:
            await self.unserve()
