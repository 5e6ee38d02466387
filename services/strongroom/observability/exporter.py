"""A process's Prometheus endpoint: `/metrics` over HTTP, on a thread of its own.

    server = MetricsServer("127.0.0.1:0", families, asyncio.get_running_loop())
    url = server.start()          # http://127.0.0.1:PORT/metrics
    ...
    server.stop()

prometheus-client serves the HTTP side (its threaded WSGI server). What a scrape returns is built
by `families`, a function that runs on the process's event loop: a scrape hands it to the loop
and waits for the answer, so the values are read where they are written, never half-way through
an update, and are the same values `status` reports at that moment. The process's own metrics
(CPU, memory, open files, garbage collections, Python version) come with them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector, start_http_server
from prometheus_client.metrics_core import Metric

__all__ = ["SCRAPE_TIMEOUT", "MetricsServer", "metrics_url", "serve_metrics", "split_listen"]

log = logging.getLogger("strongroom.metrics")

SCRAPE_TIMEOUT = 5.0
"""Seconds a scrape waits for the event loop to build its answer (a loop stalled that long
answers the scrape with an error: the stall is itself what an operator should see)."""


def split_listen(listen: str) -> tuple[str, int]:
    """("host", port) of a host:port; ValueError for anything else."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"metrics address must be host:port, not {listen!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def metrics_url(host: str, port: int) -> str:
    """The URL Prometheus scrapes for a process reached at `host` on `port`."""
    return f"http://{host}:{port}/metrics"


class _OnLoop:
    """A collector whose families are built on the event loop."""

    def __init__(self, families: Callable[[], Iterable[Metric]], loop: asyncio.AbstractEventLoop) -> None:
        self._families = families
        self._loop = loop

    async def _build(self) -> list[Metric]:
        return list(self._families())

    def collect(self) -> Iterable[Metric]:
        future = asyncio.run_coroutine_threadsafe(self._build(), self._loop)
        try:
            return future.result(timeout=SCRAPE_TIMEOUT)
        except TimeoutError:
            future.cancel()
            log.warning("a metrics scrape waited %.0f s for the event loop; answered with an error", SCRAPE_TIMEOUT)
            raise


class MetricsServer:
    """One process's `/metrics` endpoint."""

    def __init__(self, listen: str, families: Callable[[], Iterable[Metric]],
                 loop: asyncio.AbstractEventLoop) -> None:
        self.host, self.port = split_listen(listen)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_OnLoop(families, loop))  # type: ignore[arg-type]
        ProcessCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self._httpd: Any = None

    def start(self) -> int:
        """Bind and serve; the port bound (the one asked for, or a free one for port 0)."""
        self._httpd, _ = start_http_server(self.port, self.host, self.registry)
        self.port = int(self._httpd.server_address[1])
        return self.port

    def stop(self) -> None:
        """Stop serving and close the port."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None


def serve_metrics(listen: str, service_listen: str, families: Callable[[], Iterable[Metric]],
                  advertise_host: str = "") -> tuple[MetricsServer | None, str]:
    """Start a process's endpoint: at `listen` (host:port), or with "" at the host of the
    process's own gRPC `service_listen` and any free port, or none with "none". (server or None,
    its URL or "")."""
    if listen == "none":
        return None, ""
    host = service_listen.rsplit(":", 1)[0] or "127.0.0.1"
    server = MetricsServer(listen or f"{host}:0", families, asyncio.get_running_loop())
    port = server.start()
    shown = advertise_host or (server.host if server.host not in ("0.0.0.0", "::") else host)
    if shown in ("0.0.0.0", "::", "[::]"):
        shown = "127.0.0.1"
    return server, metrics_url(shown, port)
