"""Entry point of one persistence member: `strongroom-persistence`.

    strongroom-persistence --etcd 127.0.0.1:2379 --cluster default --member m1 \\
        --listen 127.0.0.1:7101 --data-dir /var/lib/strongroom/m1

The realm must already be stored in etcd (by the realm service); the member waits for it, then
checks that its cluster lists it (exit status 2 with the reason if not).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from strongroom.api.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    messaging_pb2,
    messaging_pb2_grpc,
    replication_pb2,
    replication_pb2_grpc,
)
from strongroom.errors import RealmInvalid, StrongroomError, UnknownMember
from strongroom.etcd import EtcdClient
from strongroom.persistence.k8s import install_leader_label
from strongroom.persistence.link import LinkServer, bind
from strongroom.persistence.map_servicer import MapServicer
from strongroom.persistence.maps import MapFront
from strongroom.persistence.node import NodeConfig, PersistenceNode
from strongroom.persistence.servicer import AdminServicer, MessagingServicer, ReplicationServicer
from strongroom.realm.model import Realm
from strongroom.realm.store import RealmStore, load_current_realm

__all__ = ["main", "serve", "GC_THRESHOLDS", "GRPC_OPTIONS", "gc_thresholds"]

log = logging.getLogger("strongroom.persistence")

GRPC_OPTIONS = [
    ("grpc.max_receive_message_length", 256 * 1024 * 1024),
    ("grpc.max_send_message_length", 256 * 1024 * 1024),
]

# Garbage collection. A member allocates a few dozen objects per message it handles and keeps
# many alive for long (every stored message's); with CPython's default thresholds (700, 10, 10)
# the three members and the client of the pipelined benchmark spent 112 ms of a 0.9 s window in
# collections, 76 ms of it in four full ones of up to 22 ms, each stalling every round in flight;
# with a first threshold of 10,000, 23 ms (README, Benchmarks). Cycles are still collected, in
# fewer, larger young collections. What exists once the member is up (modules, descriptors,
# channels, servers) lives as long as the process: it is frozen out of every later collection.
# STRONGROOM_GC_THRESHOLDS="700,10,10" restores CPython's default.
GC_THRESHOLDS = (10_000, 10, 10)


def gc_thresholds(setting: str | None) -> tuple[int, ...]:
    """The collector's thresholds: `setting` ("a,b,c", from STRONGROOM_GC_THRESHOLDS) or
    GC_THRESHOLDS."""
    if not setting:
        return GC_THRESHOLDS
    try:
        values = tuple(int(v) for v in setting.split(","))
    except ValueError:
        values = ()
    if len(values) != 3 or min(values) < 0:
        raise ValueError(f"STRONGROOM_GC_THRESHOLDS must be three counts 'a,b,c', not {setting!r}")
    return values


async def _load_realm(etcd: EtcdClient) -> tuple[int, Realm]:
    waited = False
    while True:
        try:
            loaded = await load_current_realm(etcd)
        except (RealmInvalid, StrongroomError) as exc:
            log.error("stored realm unreadable: %s", exc)
            loaded = None
        except Exception as exc:  # noqa: BLE001 - etcd not up yet
            log.warning("etcd not reachable yet: %s", exc)
            loaded = None
        if loaded is not None:
            return loaded
        if not waited:
            log.warning("no realm in etcd yet; waiting for `strongroom realm apply`")
            waited = True
        await asyncio.sleep(0.5)


async def _watch_realm(etcd: EtcdClient, node: PersistenceNode) -> None:
    """New realm versions take effect without a restart."""
    async for current in RealmStore(etcd).watch():
        if current.version <= node.realm_version:
            continue
        try:
            realm = current.realm()
        except RealmInvalid as exc:
            log.error("ignoring unreadable realm version %d: %s", current.version, exc)
            continue
        node.update_realm(realm, current.version)


_UNSPECIFIED_HOSTS = ("", "0.0.0.0", "::", "[::]")


def link_host(listen: str, advertise: str | None, replication_listen: str | None) -> str:
    """The host peers reach the replication link on when --replication-advertise is not given:
    the --advertise host, else the link's own listen host, else the --listen host. A wildcard
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


async def serve(etcd_endpoints: str, cluster: str, member: str, listen: str, data_dir: Path,
                advertise: str | None = None, replication_listen: str | None = None,
                replication_advertise: str | None = None) -> int:
    """Run a member until SIGTERM/SIGINT; returns the exit status.

    `replication_listen`: host:port of the replication link (None: the gRPC host, any free
    port; "none": no link, the leader replicates to this member over gRPC)."""
    advertised_link_host = ""
    if replication_listen != "none" and not replication_advertise:
        try:
            advertised_link_host = link_host(listen, advertise, replication_listen)
        except ValueError as exc:
            print(f"strongroom-persistence: {exc}", file=sys.stderr)
            return 2
    etcd = EtcdClient(etcd_endpoints)
    version, realm = await _load_realm(etcd)
    server = grpc.aio.server(options=GRPC_OPTIONS)
    port = server.add_insecure_port(listen)
    host = listen.rsplit(":", 1)[0]
    address = advertise or f"{host}:{port}"
    link_socket = None
    link_address = ""
    if replication_listen != "none":
        link_socket, link_port = bind(replication_listen or f"{host}:0")
        link_address = replication_advertise or f"{advertised_link_host}:{link_port}"
    config = NodeConfig(cluster=cluster, member=member, address=address, data_dir=data_dir,
                        etcd_endpoints=etcd_endpoints, link_address=link_address)
    try:
        node = PersistenceNode(config, realm, version)
    except UnknownMember as err:
        print(f"strongroom-persistence: {err.reason}: {err.message}", file=sys.stderr)
        await etcd.close()
        if link_socket is not None:
            link_socket.close()
        return 2
    link = LinkServer(link_socket, node.handle_append, cluster, member) if link_socket is not None else None
    messaging_pb2_grpc.add_MessagingServiceServicer_to_server(MessagingServicer(node), server)
    replication_pb2_grpc.add_ReplicationServiceServicer_to_server(ReplicationServicer(node), server)
    admin_pb2_grpc.add_AdminServiceServicer_to_server(AdminServicer(node), server)
    messaging_pb2_grpc.add_MapServiceServicer_to_server(MapServicer(MapFront(node)), server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = [
        messaging_pb2.DESCRIPTOR.services_by_name["MessagingService"].full_name,
        replication_pb2.DESCRIPTOR.services_by_name["ReplicationService"].full_name,
        admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name,
        messaging_pb2.DESCRIPTOR.services_by_name["MapService"].full_name,
        health.SERVICE_NAME,
        reflection.SERVICE_NAME,
    ]
    reflection.enable_server_reflection(names, server)
    # In a pod (the chart sets POD_NAME/POD_NAMESPACE) the leader labels itself for the leader Service.
    install_leader_label(node)
    await server.start()
    if link is not None:
        await link.start()
    await node.start()
    for name in ("", *names[:4]):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    log.info("member %s of cluster %s listening on %s, replication link %s (storage %s)", member, cluster,
             address, link_address or "off (appends over gRPC)", node.storage_mode)
    print(f"READY {address}", flush=True)
    gc.collect()
    gc.freeze()
    watcher = asyncio.create_task(_watch_realm(etcd, node))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("stopping member %s", member)
    for name in ("", *names[:4]):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    watcher.cancel()
    if link is not None:
        await link.stop()
    await node.stop()
    await server.stop(grace=2)
    await etcd.close()
    return 0


def main(argv: list[str] | None = None) -> None:
    """Parse arguments and run the member."""
    parser = argparse.ArgumentParser(prog="strongroom-persistence", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--etcd", required=True, help="etcd endpoints, host:port[,host:port]")
    parser.add_argument("--cluster", required=True, help="the persistence cluster this member belongs to")
    parser.add_argument("--member", required=True, help="this member's name in the realm")
    parser.add_argument("--listen", default="127.0.0.1:0", help="host:port to serve gRPC on")
    parser.add_argument("--advertise", default=None, help="host:port peers and clients use (default: listen)")
    parser.add_argument("--replication-listen", default=None,
                        help="host:port of the replication link, the plain TCP connection the leader sends "
                             "appends on (default: the --listen host, any free port; 'none': appends over gRPC)")
    parser.add_argument("--replication-advertise", default=None,
                        help="host:port the leader reaches the replication link on (default: the --advertise "
                             "host, else the link's listen host, and the link's port)")
    parser.add_argument("--data-dir", required=True, type=Path, help="where the member keeps its RocksDB files")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    # Threads that hand work to the event loop (gRPC's poller, RocksDB calls that release the
    # GIL) get it back within 0.5 ms instead of the default 5 ms.
    sys.setswitchinterval(float(os.environ.get("STRONGROOM_SWITCH_INTERVAL", "0.0005")))
    try:
        gc.set_threshold(*gc_thresholds(os.environ.get("STRONGROOM_GC_THRESHOLDS")))
    except ValueError as exc:
        print(f"strongroom-persistence: {exc}", file=sys.stderr)
        sys.exit(2)
    logging.basicConfig(level=args.log_level.upper(),
                        format=f"%(asctime)s {args.member} %(levelname)s %(name)s: %(message)s")
    sys.exit(asyncio.run(serve(args.etcd, args.cluster, args.member, args.listen, args.data_dir, args.advertise,
                               args.replication_listen, args.replication_advertise)))


if __name__ == "__main__":
    main()
