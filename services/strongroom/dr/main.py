"""Entry point of a cluster's DR service at one of its two sites: `strongroom-dr`.

    strongroom-dr --etcd 127.0.0.1:2479 --cluster main [--listen 127.0.0.1:7600]

`--etcd` is the etcd of the site it runs at (the realm must be stored there, by that site's realm
service). The service waits for the realm, checks that the cluster has a standby set (exit
status 2 with the reason if not), finds which of the cluster's sets runs at its site (the
members registered in that etcd: the standby set, or the primary set) and their addresses, and
serves `DrService` (Status, Activate) and gRPC health on `--listen` until SIGTERM or SIGINT.
What it does follows the site's DR record (`dr/control.py`), whose role starts as the realm's:
at a standby site it ships the committed log of the primary the record names (`Shipper`,
logging its lag every `--report` seconds); at a primary site it does nothing until the site is
fenced and demoted, then ships there from the activated site; after an activation it stops
shipping and tells the old primary it is fenced. `strongroom up` runs one at each site of a
cluster with a standby set. It exits with status 1 when the two sites turn out to hold
different histories (DIVERGED): shipping stops rather than attach the primary's entries to
another log. Design: docs/dr.md.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from strongroom.ready import say_ready
from strongroom.dr.control import DrControl
from strongroom.dr.record import default_record, read_record
from strongroom.dr.server import DrServer
from strongroom.etcd import EtcdClient
from strongroom.persistence.membership import member_addresses
from strongroom.keys import members_prefix
from strongroom.realm.model import Cluster, Member, Realm
from strongroom.realm.store import wait_for_realm
from strongroom.security.tls import announce

__all__ = ["main", "serve", "site_set", "why_no_standby"]

log = logging.getLogger("strongroom.dr")


async def site_set(etcd: EtcdClient, cluster: Cluster) -> list[Member]:
    """The set of `cluster`'s members that runs at this site, as the members registered in the
    site's etcd say: the primary set's (the DR service at the primary set's site: idle while the
    site is the primary, shipping there once it is demoted) or else the standby set's. Waits
    for a registration."""
    assert cluster.standby is not None
    primary = {m.name for m in cluster.members}
    while True:
        try:
            names = {kv.key.rsplit("/", 1)[-1] for kv in await etcd.get_prefix(members_prefix(cluster.name))}
        except Exception as exc:  # noqa: BLE001 - etcd away: look again
            log.warning("cannot read the members of %s: %s", cluster.name, exc)
            names = set()
        if names & primary:
            return cluster.members
        if names:
            return cluster.standby.members
        await asyncio.sleep(0.5)


def why_no_standby(realm: Realm, cluster: str) -> str | None:
    """Why the realm gives the DR service of `cluster` nothing to do at either site (None: the
    cluster has a standby set, so both of its sites run one)."""
    c = realm.cluster(cluster)
    if c is None:
        return f"the realm defines no cluster {cluster!r}"
    if c.standby is None:
        return f"cluster {cluster!r} has no standby set in the realm (clusters[].standby)"
    return None


async def serve(args: argparse.Namespace) -> int:
    """Run until SIGTERM/SIGINT; returns the exit status."""
    etcd = EtcdClient(args.etcd)
    try:
        _version, realm = await wait_for_realm(etcd, log)
        why = why_no_standby(realm, args.cluster)
        if why is not None:
            print(f"strongroom-dr: {why}", file=sys.stderr)
            return 2
        cluster = realm.cluster(args.cluster)
        assert cluster is not None and cluster.standby is not None
        site = await site_set(etcd, cluster)
        standby_site = site is cluster.standby.members
        default = default_record(standby_site, cluster.standby.primary,
                                 [m.address for m in cluster.standby.members if m.address])
        record = await read_record(etcd, args.cluster, default)
        members = await member_addresses(etcd, args.cluster, site)
        control = DrControl(etcd, args.cluster, default, record, members, heartbeat=args.heartbeat)
        server = DrServer(args.listen, args.cluster, control, realm)
        try:
            port = await server.serve()
        except OSError as exc:
            print(f"strongroom-dr: {exc}", file=sys.stderr)
            return 2
        try:
            url = server.serve_metrics(args.metrics_listen, "standby" if standby_site else "primary")
        except (OSError, ValueError) as exc:
            print(f"strongroom-dr: metrics endpoint: {exc}", file=sys.stderr)
            await server.close()
            return 2
        control.start()
        host = args.listen.rpartition(":")[0]
        say_ready("dr", args.cluster, f"{host}:{port}")
        log.info("DR service of %s at the site of its %s set, which is %s: the other site at %s, this site's set "
                 "at %s; metrics %s", args.cluster, "standby" if standby_site else "primary", record.describe(),
                 ",".join(record.peer) or "no address", ",".join(members), url or "off")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        stopping = asyncio.create_task(stop.wait())
        failing = asyncio.create_task(control.wait_failed())
        while not stop.is_set() and control.failed() is None:
            await asyncio.wait({stopping, failing}, timeout=args.report, return_when=asyncio.FIRST_COMPLETED)
            if control.state == "shipping" and control.failed() is None:
                st = control.status()
                log.info("primary commit %d, standby at %d: %d entries, %d messages and %.1f s behind (reading %s)",
                         st.primary_commit_index, st.standby_last_index, st.entries_behind, st.messages_behind,
                         st.seconds_behind, st.primary_member or "-")
        stopping.cancel()
        failing.cancel()
        status = 0
        err = control.failed()
        if err is not None:
            # Only a divergence of the two sites' histories ends shipping: an operator's decision.
            print(f"strongroom-dr: shipping stopped: {err}", file=sys.stderr)
            log.critical("shipping stopped: %s", err)
            status = 1
        await server.close()
        await control.close()
        return status
    finally:
        await etcd.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="strongroom-dr", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--etcd", required=True, help="the etcd endpoints of the site it runs at, host:port[,host:port]")
    parser.add_argument("--cluster", required=True, help="the cluster (with a standby set) whose set at this site it serves")
    parser.add_argument("--listen", default="127.0.0.1:0",
                        help="host:port to serve DrService and health on (default: loopback, any free port; the "
                             "READY line names it)")
    parser.add_argument("--heartbeat", type=float, default=1.0,
                        help="seconds between the primary's heartbeats on the stream (default 1)")
    parser.add_argument("--report", type=float, default=10.0, help="seconds between lag lines in the log (default 10)")
    parser.add_argument("--metrics-listen", default="", metavar="HOST:PORT",
                        help="where Prometheus scrapes the DR service's metrics (default: the --listen host, any "
                             "free port; 'none': no metrics endpoint)")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format=f"%(asctime)s dr-{args.cluster} %(levelname)s %(name)s: %(message)s")
    announce(log)
    sys.exit(asyncio.run(serve(args)))


if __name__ == "__main__":
    main()
