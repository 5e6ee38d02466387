"""A router replica's gRPC server: RouterService, health and reflection (as the members serve
them), on the cluster's router address.

Two ways to keep the realm's one address on the active replica:

- **Bind when active** (the default; local runs, where replicas share a host and a port): a
  standby does not listen; it binds once elected (`serve`) and lets go when it is no longer
  active (`unserve`).
- **Serve as standby** (`serve_standby`, Kubernetes, where each pod has its own address and a
  Service picks the pod the active replica labelled, persistence/k8s.py): every replica listens
  from the start; health service `""` is SERVING on all of them (the probes: every running
  replica is live and ready), `strongroom.v1.RouterService` only on the active one (for a
  look at which one is), and a standby answers RouterService calls with NOT_ACTIVE_ROUTER
  (Forward, ExchangeInterest) or its own view (Status).
"""

from __future__ import annotations

import asyncio
import logging

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from strongroom.api.v1 import router_pb2, router_pb2_grpc
from strongroom.channels import SERVER_OPTIONS, add_port, new_server
from strongroom.reflection import enable_reflection
from strongroom.routing.router import Router
from strongroom.routing.servicer import RouterServicer
from strongroom.security.guard import Guard
from strongroom.security.tokens import TokenBook

__all__ = ["SERVICE", "RouterServer"]

log = logging.getLogger("strongroom.router")

SERVICE = router_pb2.DESCRIPTOR.services_by_name["RouterService"].full_name
"""strongroom.v1.RouterService"""


class RouterServer:
    """The RouterService of one replica, served while it is the active router."""

    def __init__(self, listen: str, serve_standby: bool = False) -> None:
        self.listen = listen
        self.serve_standby = serve_standby
        self.router: Router | None = None
        self._server: grpc.aio.Server | None = None
        self._health: health.aio.HealthServicer | None = None
        self.port = 0
        self._tokens: TokenBook | None = None
        self._following: asyncio.Task[None] | None = None

    async def serve(self) -> int:
        """Bind the listen address and serve; the port (OSError when it cannot be bound)."""
        assert self.router is not None
        if self._server is not None:
            return self.port
        server = new_server([*SERVER_OPTIONS, ("grpc.so_reuseport", 0)])
        router = self.router
        if self._tokens is None:  # the site's bearer tokens, for operators' status calls
            self._tokens = TokenBook(router.etcd)
            self._following = asyncio.create_task(self._tokens.follow(), name="tokens")
        router_pb2_grpc.add_RouterServiceServicer_to_server(
            RouterServicer(router, Guard(lambda: router.realm, self._tokens)), server)
        health_servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        enable_reflection([SERVICE, health.SERVICE_NAME], server)
        port = add_port(server, self.listen)
        if port == 0:
            await server.stop(None)
            raise OSError(f"cannot listen on {self.listen}")
        await server.start()
        await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        serving = self.router.active or not self.serve_standby
        await health_servicer.set(SERVICE, health_pb2.HealthCheckResponse.SERVING if serving
                                  else health_pb2.HealthCheckResponse.NOT_SERVING)
        self._server, self._health, self.port = server, health_servicer, port
        log.info("router of %s serving on %s", self.router.cluster, self.listen)
        return port

    async def unserve(self, grace: float = 1.0) -> None:
        """Stop serving (the address is free for the next active replica)."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace)

    async def on_active(self, active: bool) -> None:
        """The router's election hook: serve while active (or, serving as standby, say so in
        RouterService's health)."""
        if self.serve_standby:
            if self._health is not None:
                await self._health.set(SERVICE, health_pb2.HealthCheckResponse.SERVING if active
                                       else health_pb2.HealthCheckResponse.NOT_SERVING)
        elif active:
            await self.serve()
        else:
            await self.unserve()
