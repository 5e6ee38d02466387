"""`strongroom-realm`: run the realm service.

    strongroom-realm --etcd 127.0.0.1:2379 --listen 127.0.0.1:7400 [--realm-file realm.yaml]

Registers its address at `/strongroom/services/realm` under a lease it keeps alive, so clients
and the CLI find it through etcd; SIGTERM stops it gracefully and revokes the lease.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from collections import Counter
from pathlib import Path

from strongroom.errors import RealmInvalid
from strongroom.etcd import EtcdClient, EtcdUnavailable
from strongroom.keys import REALM_SERVICE
from strongroom.observability.exporter import serve_metrics
from strongroom.observability.services import realm_families
from strongroom.realm.service import create_server
from strongroom.realm.store import RealmStore
from strongroom.security.tls import announce

__all__ = ["LEASE_TTL_SECONDS", "main"]

log = logging.getLogger("strongroom.realm")

LEASE_TTL_SECONDS = 10
GRACE_SECONDS = 2.0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="strongroom-realm", description="Run the Strongroom realm service.")
    p.add_argument("--etcd", default=os.environ.get("STRONGROOM_ETCD"),
                   required="STRONGROOM_ETCD" not in os.environ,
                   help="etcd endpoints, host:port[,host:port...] (env STRONGROOM_ETCD)")
    p.add_argument("--listen", default="127.0.0.1:7400",
                   help="host:port to serve gRPC on (port 0: any free port)")
    p.add_argument("--advertise", default=os.environ.get("STRONGROOM_ADVERTISE"),
                   help="host:port registered in etcd for clients (default: the listen address; "
                        "a wildcard host is replaced by this host's name) (env STRONGROOM_ADVERTISE)")
    p.add_argument("--realm-file", type=Path, default=None,
                   help="realm YAML applied at startup if etcd holds no realm yet")
    p.add_argument("--metrics-listen", default="", metavar="HOST:PORT",
                   help="where Prometheus scrapes the realm service's metrics (default: the --listen host, any "
                        "free port; 'none': no metrics endpoint)")
    return p


def _advertised(listen: str, port: int, advertise: str | None) -> str:
    if advertise:
        return advertise
    host = listen.rsplit(":", 1)[0].strip("[]")
    if host in ("", "0.0.0.0", "::"):
        # A wildcard is not an address anyone can dial.
        host = socket.gethostname()
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def _register(etcd: EtcdClient, address: str) -> int:
    lease = await etcd.grant(LEASE_TTL_SECONDS)
    await etcd.put(REALM_SERVICE, address.encode(), lease=lease)
    return lease


async def _keep_registered(etcd: EtcdClient, address: str, lease_box: list[int]) -> None:
    """Refresh the lease at TTL/3; re-register after a lost lease or a replica's deregistration."""
    while True:
        await asyncio.sleep(LEASE_TTL_SECONDS / 3)
        try:
            ttl = await etcd.keepalive_once(lease_box[0])
            if ttl <= 0:
                log.warning("realm registration lease expired; registering again")
                lease_box[0] = await _register(etcd, address)
            elif await etcd.get(REALM_SERVICE) is None:
                # Another realm replica stopped and revoked its lease, taking the key with it.
                await etcd.put(REALM_SERVICE, address.encode(), lease=lease_box[0])
        except (EtcdUnavailable, OSError) as exc:
            log.warning("cannot refresh the realm registration in etcd: %s", exc)
        except Exception as exc:  # noqa: BLE001 - keep serving; the next round retries
            log.warning("realm registration refresh failed: %s", exc)


async def _follow_version(etcd: EtcdClient, current: list[int]) -> None:
    """Keep `current[0]` the realm version current in etcd."""
    async for version in RealmStore(etcd).watch():
        current[0] = version.version


async def _run(args: argparse.Namespace) -> int:
    etcd = EtcdClient(args.etcd)
    try:
        if args.realm_file is not None:
            try:
                text = args.realm_file.read_text()
            except OSError as exc:
                log.error("cannot read realm file %s: %s", args.realm_file, exc.strerror or exc)
                return 1
            try:
                version = await RealmStore(etcd).bootstrap(text, str(args.realm_file))
            except RealmInvalid as err:
                log.error("%s", err.message)
                return 1
            log.info("realm version %d is current", version.version)

        applies: Counter[str] = Counter()
        server, port = await create_server(args.etcd, args.listen, etcd=etcd, applies=applies)
        address = _advertised(args.listen, port, args.advertise)
        current = [0]  # the realm version current in etcd, followed for the metrics
        follower = asyncio.create_task(_follow_version(etcd, current))
        try:
            metrics, url = serve_metrics(args.metrics_listen, args.listen,
                                         lambda: realm_families(address, current[0], applies))
        except (OSError, ValueError) as exc:
            log.error("metrics endpoint: %s", exc)
            follower.cancel()
            await server.stop(None)
            return 2
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        lease_box = [await _register(etcd, address)]
        keeper = asyncio.create_task(_keep_registered(etcd, address, lease_box))
        host = args.listen.rsplit(":", 1)[0]
        log.info("realm service listening on %s:%d", host, port)
        log.info("realm service metrics %s", url or "off")

        await stop.wait()
        keeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeper
        # Deregister first so nobody discovers a server that is going away.
        try:
            await asyncio.wait_for(etcd.revoke(lease_box[0]), timeout=2.0)
        except Exception as exc:  # noqa: BLE001 - the lease expires on its own anyway
            log.warning("cannot revoke the realm registration lease: %s", exc)
        await server.stop(grace=GRACE_SECONDS)
        follower.cancel()
        if metrics is not None:
            metrics.stop()
        return 0
    except EtcdUnavailable as exc:
        log.error("cannot reach etcd at %s: %s", args.etcd, exc)
        return 1
    finally:
        await etcd.close()


def main(argv: list[str] | None = None) -> None:
    """Console entry point of `strongroom-realm`."""
    args = _parser().parse_args(argv)
    # One plain line per event: the launcher and tests wait for "realm service listening on".
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    announce(log)
    sys.exit(asyncio.run(_run(args)))


if __name__ == "__main__":
    main()
