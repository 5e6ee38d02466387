"""Entry point of a cluster's router: `strongroom-router`.

    strongroom-router --etcd 127.0.0.1:2379 --cluster rio --listen 0.0.0.0:7400 --replica r1

The realm must be stored in the cluster's etcd (by its realm service); the router waits for it,
then checks that the realm routes the cluster (exit status 2 with the reason if not). Replicas
of one cluster elect the active router through that etcd; a standby waits and takes over when
the active one's lease lapses. The active replica serves RouterService on `--listen`, which must
be where the realm's `clusters[].router.address` reaches it. In a Kubernetes pod (POD_NAME and
POD_NAMESPACE set) the active replica labels its pod `strongroom.io/role=active` and removes the
label when it stops being active, which the chart's router Service selects (persistence/k8s.py).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys

from strongroom.ready import say_ready
from strongroom.client import Client
from strongroom.errors import RealmInvalid
from strongroom.etcd import EtcdClient
from strongroom.observability.exporter import serve_metrics
from strongroom.observability.services import router_families
from strongroom.persistence.config import gc_thresholds
from strongroom.persistence.k8s import ACTIVE_VALUE, install_leader_label
from strongroom.persistence.membership import member_addresses
from strongroom.realm.model import Realm
from strongroom.realm.store import RealmStore, wait_for_realm
from strongroom.routing.router import Router, RouterConfig
from strongroom.routing.server import RouterServer
from strongroom.routing.transport import GrpcLinks
from strongroom.security.tls import announce

__all__ = ["main", "serve", "why_not_routed"]

log = logging.getLogger("strongroom.router")

CLIENT_TIMEOUT = 10.0
"""Seconds the router's client to its own cluster rides out an outage before an operation fails
(a route then backs off and resumes; a Forward batch is answered with the error)."""


def why_not_routed(realm: Realm, cluster: str) -> str | None:
    """Why the realm gives this cluster nothing to route (None: it routes it)."""
    c = realm.cluster(cluster)
    if c is None:
        return f"the realm defines no cluster {cluster!r}"
    if not realm.routed_stores(cluster):
        return (f"the realm routes nothing at cluster {cluster!r}: no routed store with more than one cluster "
                f"includes it (a router runs only at clusters in the zones of a routed store)")
    if c.router is None:
        return f"cluster {cluster!r} has no router address in the realm (clusters[].router.address)"
    return None


async def _watch_realm(etcd: EtcdClient, router: Router, version: int) -> None:
    async for current in RealmStore(etcd).watch():
        if current.version <= version:
            continue
        try:
            realm = current.realm()
        except RealmInvalid as exc:
            log.error("ignoring unreadable realm version %d: %s", current.version, exc)
            continue
        version = current.version
        why = why_not_routed(realm, router.cluster)
        if why is not None:
            log.error("realm version %d: %s; keeping the routes of the version before", version, why)
            continue
        log.info("realm version %d in force", version)
        router.update_realm(realm)


async def serve(args: argparse.Namespace) -> int:
    """Run a router replica until SIGTERM/SIGINT; returns the exit status."""
    etcd = EtcdClient(args.etcd)
    try:
        version, realm = await wait_for_realm(etcd, log)
        why = why_not_routed(realm, args.cluster)
        if why is not None:
            print(f"strongroom-router: {why}", file=sys.stderr)
            return 2
        cluster = realm.cluster(args.cluster)
        assert cluster is not None and cluster.router is not None
        endpoints = await member_addresses(etcd, args.cluster, cluster.members)
        client = Client(endpoints, client_name=f"router-{args.cluster}-{args.replica}", timeout=CLIENT_TIMEOUT)
        holder: dict[str, Router] = {}

        def address_of(neighbour: str) -> str:
            c = holder["router"].realm.cluster(neighbour)
            return c.router.address if c is not None and c.router is not None else ""

        links = GrpcLinks(address_of)
        server = RouterServer(args.listen, serve_standby=args.serve_standby)
        config = RouterConfig(cluster=args.cluster, replica=args.replica, address=cluster.router.address,
                              lease_ttl=cluster.lease_ttl_seconds)
        router = Router(config, realm, client, links, etcd, on_active=server.on_active)
        holder["router"] = server.router = router
        install_leader_label(router, value=ACTIVE_VALUE)  # in a pod only; nothing otherwise
        try:
            metrics, router.metrics_url = serve_metrics(args.metrics_listen, args.listen,
                                                        lambda: router_families(router.status()))
        except (OSError, ValueError) as exc:
            print(f"strongroom-router: metrics endpoint: {exc}", file=sys.stderr)
            return 2
        if args.serve_standby:
            await server.serve()
        await router.start()
        # What exists once the router is up lives as long as the process: out of every later
        # collection (as a member does, persistence/server.py).
        gc.collect()
        gc.freeze()
        say_ready(args.replica, args.listen)
        log.info("router replica %s of %s started (members %s; serves on %s once active; metrics %s)", args.replica,
                 args.cluster, ",".join(endpoints), args.listen, router.metrics_url or "off")
        watcher = asyncio.create_task(_watch_realm(etcd, router, version))
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        log.info("stopping router replica %s", args.replica)
        watcher.cancel()
        await router.stop()
        if metrics is not None:
            metrics.stop()
        await server.unserve()
        await links.close()
        await client.close()
        return 0
    finally:
        await etcd.close()


def main(argv: list[str] | None = None) -> None:
    """Parse arguments and run the router replica."""
    parser = argparse.ArgumentParser(prog="strongroom-router", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--etcd", required=True, help="the cluster's etcd endpoints, host:port[,host:port]")
    parser.add_argument("--cluster", required=True, help="the cluster this router routes for")
    parser.add_argument("--listen", required=True,
                        help="host:port to serve RouterService on once active (where the realm's router address "
                             "reaches it)")
    parser.add_argument("--replica", required=True, help="this replica's name (unique among the cluster's replicas)")
    parser.add_argument("--serve-standby", action="store_true",
                        help="listen while standby too, RouterService NOT_SERVING in health until active "
                             "(Kubernetes: each replica has its own address and is ready, the Service selects "
                             "the pod the active one labels; default: bind once active)")
    parser.add_argument("--metrics-listen", default="", metavar="HOST:PORT",
                        help="where Prometheus scrapes the replica's metrics, active or not (default: the --listen "
                             "host, any free port; 'none': no metrics endpoint)")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    try:
        # A router allocates a few objects per message it passes on: the members' thresholds
        # (STRONGROOM_GC_THRESHOLDS), so it does not collect every few batches.
        gc.set_threshold(*gc_thresholds(os.environ.get("STRONGROOM_GC_THRESHOLDS")))
    except ValueError as exc:
        print(f"strongroom-router: {exc}", file=sys.stderr)
        sys.exit(2)
    logging.basicConfig(level=args.log_level.upper(),
                        format=f"%(asctime)s router-{args.replica} %(levelname)s %(name)s: %(message)s")
    announce(log)
    sys.exit(asyncio.run(serve(args)))


if __name__ == "__main__":
    main()
