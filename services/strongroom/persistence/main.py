"""Entry point of one persistence member: `strongroom-persistence`.

    strongroom-persistence --etcd 127.0.0.1:2379 --cluster default --member m1 \\
        --listen 127.0.0.1:7101 --data-dir /var/lib/strongroom/m1

A cluster with a shared store (realm `shared_store`) runs its one member as two instances on
one data directory, each at one of the realm's instance addresses: `--run-mode standard` and
`--run-mode standby` (docs/store-operations.md, "Standby on a shared store").

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
from collections.abc import Coroutine
from dataclasses import replace
from pathlib import Path
from typing import Any

from strongroom.ready import say_ready
from strongroom.errors import RealmInvalid, StoreDriverMismatch, StrongroomError, UnknownMember
from strongroom.etcd import EtcdClient
from strongroom.observability import memtrace
from strongroom.persistence.config import MemberConfig
from strongroom.persistence.node import PersistenceNode
from strongroom.persistence.server import create_server, link_host
from strongroom.persistence.shared_standby import HandshakeFailed, RunMode, StoreLock, StoreLocked, watch_ownership
from strongroom.persistence.standby_server import stand_by
from strongroom.realm.store import RealmStore, wait_for_realm
from strongroom.security.tls import announce

__all__ = ["main", "serve"]

log = logging.getLogger("strongroom.persistence")


async def _watch_realm(etcd: EtcdClient, node: PersistenceNode) -> None:
    """New realm versions take effect without a restart."""
    async for current in RealmStore(etcd).watch(restore=True):
        if current.version <= node.realm_version:
            continue
        try:
            realm = current.realm()
        except RealmInvalid as exc:
            log.error("ignoring unreadable realm version %d: %s", current.version, exc)
            continue
        node.update_realm(realm, current.version)


def _fenced(holder: str) -> None:
    """Another instance holds the shared store: stop before writing anything more."""
    log.critical("the shared store's lock file names another holder (%s): this instance lost its lock and "
                 "stops at once, without writing", holder)
    logging.shutdown()
    os._exit(70)


async def serve(config: MemberConfig, run_mode: str = "") -> int:
    """Run a member until SIGTERM/SIGINT; returns the exit status. `run_mode` ("standard",
    "standby"): how an instance of a shared store starts (docs/store-operations.md; "" is
    standard)."""
    if config.replication_link and not config.replication_advertise:
        try:
            # Refused before anything else (before waiting for a realm): no peer could reach it.
            link_host(config.listen, config.advertise, config.replication_listen)
        except ValueError as exc:
            print(f"strongroom-persistence: {exc}", file=sys.stderr)
            return 2
    etcd = EtcdClient(config.etcd_endpoints)
    version, realm = await wait_for_realm(etcd, log)
    cluster = realm.cluster(config.cluster)
    shared = cluster.shared_store if cluster is not None else None
    lock: StoreLock | None = None  # a shared store's lock: held until the process ends
    try:
        if shared is not None:
            config, lock = await stand_by(config, shared, RunMode(run_mode or RunMode.STANDARD.value))
        elif run_mode:
            raise ValueError(f"--run-mode {run_mode}: cluster {config.cluster} has no shared_store in the realm")
        member, _ = await create_server(config, realm, version)
    except (UnknownMember, StoreDriverMismatch, ValueError, OSError, StoreLocked, HandshakeFailed) as err:
        why = f"{err.reason}: {err.message}" if isinstance(err, StrongroomError) else str(err)
        if isinstance(err, HandshakeFailed):
            why = f"handshake with the partner failed: {why}"
        print(f"strongroom-persistence: {why}", file=sys.stderr)
        await etcd.close()
        return 2
    say_ready(member.config.address)
    fence = asyncio.create_task(watch_ownership(lock, config.control_interval, _fenced), name="store-lock") \
        if lock is not None else None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    memtrace.install(config.data_dir)
    while True:
        watcher = asyncio.create_task(_watch_realm(etcd, member.node))
        damaged = member.node.replica.scrub.found
        await _first(stop.wait(), damaged.wait())
        watcher.cancel()
        if stop.is_set():
            break
        # The scrub found the store damaged (scrub.py): stop serving and voting (step down,
        # resign), then start again on the same addresses; the start moves the store aside
        # and the member rebuilds it from its peers.
        node, again = member.node, member.again()
        log.warning("member %s stops and starts again on an empty store: the scrub found its store damaged",
                    config.member)
        gc.unfreeze()  # what the old member froze at its start is garbage once it stops
        await member.stop(grace=2)
        try:
            member, _ = await create_server(again, node.realm, node.realm_version)
        except Exception as exc:  # noqa: BLE001 - a port taken meanwhile, etcd away: the next start
            log.error("member %s cannot start again after the damage found (%s: %s); it exits, and its next start "
                      "moves the store aside", config.member, type(exc).__name__, exc)
            if fence is not None:
                fence.cancel()
            await etcd.close()
            return 1
    log.info("stopping member %s", config.member)
    if fence is not None:
        fence.cancel()
    await member.stop(grace=2)
    await etcd.close()
    return 0


async def _first(*waits: Coroutine[Any, Any, object]) -> None:
    """Wait until one of `waits` is done; the others are cancelled."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


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
    parser.add_argument("--event-log-dir", default="",
                        help="turn the store event log on, into this directory (shared by the cluster's members; "
                             "default: as the realm's cluster says, else off; STRONGROOM_EVENT_LOG_DIR)")
    parser.add_argument("--pstore-report", default="", metavar="FILE",
                        help="where the PSTORE report goes when the realm's persistent_store.report is on (default: "
                             "$STRONGROOM_PSTORE_REPORT, else PSTORE.REPORT in the data directory)")
    parser.add_argument("--metrics-listen", default="", metavar="HOST:PORT",
                        help="where Prometheus scrapes the member's metrics (default: the --listen host, any free "
                             "port; 'none': no metrics endpoint; STRONGROOM_METRICS_LISTEN)")
    parser.add_argument("--stats-interval", type=float, default=None, metavar="SECONDS",
                        help="seconds between two lines of the statistics log (default 60, 0: off; "
                             "STRONGROOM_STATS_INTERVAL)")
    parser.add_argument("--run-mode", choices=[m.value for m in RunMode], default="",
                        help="an instance of a cluster with a shared store (realm shared_store): standard (takes "
                             "the store at once) or standby (takes it over when the standard stops answering; "
                             "the first of two standbys becomes the standard); default standard")
    args = parser.parse_args(argv)
    config = MemberConfig(
        cluster=args.cluster, member=args.member, data_dir=args.data_dir, etcd_endpoints=args.etcd,
        listen=args.listen, advertise=args.advertise or "", replication_listen=args.replication_listen or "",
        replication_advertise=args.replication_advertise or "", log_level=args.log_level,
        event_log_dir=args.event_log_dir, pstore_report=args.pstore_report, metrics_listen=args.metrics_listen)
    try:
        config = config.with_environment()
        if args.stats_interval is not None:
            if args.stats_interval < 0:
                raise ValueError(f"--stats-interval must be 0 (off) or more seconds, not {args.stats_interval:g}")
            config = replace(config, stats_interval=args.stats_interval)
    except ValueError as exc:
        print(f"strongroom-persistence: {exc}", file=sys.stderr)
        sys.exit(2)
    sys.setswitchinterval(config.switch_interval)
    gc.set_threshold(*config.gc_thresholds)
    logging.basicConfig(level=config.log_level.upper(),
                        format=f"%(asctime)s {config.member} %(levelname)s %(name)s: %(message)s")
    announce(log)
    sys.exit(asyncio.run(serve(config, args.run_mode)))


if __name__ == "__main__":
    main()
