"""`DrControl`: what the DR service does at its site, as the site's DR record says.

- standby: ship the committed log of the primary the record names (its `peer`) to this site's
  set (`Shipper`);
- primary: nothing while the other site is a plain standby (generation 0: nothing was
  activated); a site that became the primary by activation tells the old primary, the record's
  `peer`, that it is superseded (`Fencer`);
- fenced: nothing (an operator demotes the site).

A cluster runs one DR service at each of its two sites (`strongroom up` starts both), and
either site's record goes through every role: the standby site's is activated (standby ->
primary), the old primary's is fenced and then demoted (primary -> fenced -> standby), with the
other site as its peer. So the service follows the record in its site's etcd and acts on every
change of role, generation or peer without a restart: shipping stops when the site leaves the
standby role and starts when it takes it, always from the peer the record names at that moment
(the shipper is built again when the peer changes: its lag and counts start over); fencing
stops when the site stops being an activated primary. It serves `DrService` (`server.py`): the
status, and the activation (`Activation`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from strongroom.aio import cancel_and_wait
from strongroom.dr.activation import Activation, TailLoss
from strongroom.dr.fencer import Fencer
from strongroom.dr.record import DrRecord, DrRole
from strongroom.dr.shipper import Shipper, ShipStatus
from strongroom.etcd import EtcdClient
from strongroom.keys import dr_key

__all__ = ["DrControl"]

log = logging.getLogger("strongroom.dr")


class DrControl:
    """The DR service of one cluster at one site."""

    def __init__(self, etcd: EtcdClient, cluster: str, default: DrRecord, record: DrRecord,
                 site_members: Sequence[str], heartbeat: float = 1.0) -> None:
        self.etcd = etcd
        self.cluster = cluster
        self.default = default
        self.record = record
        self.site_members = list(site_members)
        self.heartbeat = heartbeat
        self.shipper = Shipper(record.peer, self.site_members, heartbeat=heartbeat)
        """Ships from the primary the record names (`record.peer`); replaced when that changes."""
        self.activation = Activation(etcd, cluster, default, self.shipper, self.stop_shipping, self.resume_shipping,
                                     self.site_members)
        self.fencer: Fencer | None = None
        self._shipping: asyncio.Task[None] | None = None
        self._fencing: asyncio.Task[None] | None = None
        self._following: asyncio.Task[None] | None = None
        self._retiring: set[asyncio.Task[None]] = set()
        self._failure: BaseException | None = None
        self._failed = asyncio.Event()
        self._started = False

    @property
    def state(self) -> str:
        """"shipping" (a standby); "activating" (a standby whose shipping an activation stopped: it
        resumes unless the activation writes the record); "primary" (serves clients; after an
        activation, fencing the old primary) or "fenced"."""
        if self.record.role is DrRole.STANDBY:
            stopped = self._started and self._shipping is None and bool(self.record.peer)
            return "activating" if stopped else "shipping"
        return self.record.role.value

    def primary_addresses(self) -> list[str]:
        """Where the cluster's primary is, as this site's record says: this site's set when it
        is the primary, else the other site (the record's peer)."""
        return self.site_members if self.record.role is DrRole.PRIMARY else list(self.record.peer)

    def standby_addresses(self) -> list[str]:
        """The other set: the peer when this site is the primary, else this site's set (a
        standby, or a fenced site that becomes one when demoted)."""
        return list(self.record.peer) if self.record.role is DrRole.PRIMARY else self.site_members

    def start(self) -> None:
        """Act on the record, and follow it."""
        self._started = True
        self._apply(self.record)
        self._following = asyncio.create_task(self._follow(), name="dr-record")

    def failed(self) -> BaseException | None:
        """Why shipping stopped for good (the sites hold different histories), if it did."""
        return self._failure

    async def wait_failed(self) -> BaseException:
        """Until shipping stops for good; why."""
        await self._failed.wait()
        assert self._failure is not None
        return self._failure

    def status(self) -> ShipStatus:
        return self.shipper.status()

    async def activate(self, force: bool) -> TailLoss:
        return await self.activation.activate(force)

    async def stop_shipping(self) -> None:
        task, self._shipping = self._shipping, None
        if task is not None:
            await cancel_and_wait(task)

    def resume_shipping(self) -> None:
        """Ship again after `stop_shipping`, if the site's record still says standby (an activation
        that failed before writing it). Were it written after all, following it stops shipping."""
        self._apply(self.record)

    async def close(self) -> None:
        for task in (self._following, self._fencing, *self._retiring):
            if task is not None:
                await cancel_and_wait(task)
        await self.stop_shipping()
        await self.shipper.close()

    async def _follow(self) -> None:
        async for kind, kv in self.etcd.follow(dr_key(self.cluster)):
            record = DrRecord.from_bytes(kv.value, kv.mod_revision) if kind == "PUT" else self.default
            old, self.record = self.record, record
            if (record.role, record.generation, record.peer) != (old.role, old.generation, old.peer):
                log.warning("cluster %s at this site: %s -> %s (the other site at %s)", self.cluster, old.describe(),
                            record.describe(), ",".join(record.peer) or "no address")
                self._apply(record)

    def _apply(self, record: DrRecord) -> None:
        if record.role is DrRole.STANDBY:
            self._stop_fencing()
            if tuple(self.shipper.primary) != record.peer:
                self._replace_shipper(record.peer)
            if self._shipping is None:
                if not record.peer:
                    log.error("cluster %s at this site is a standby, but its DR record names no primary to ship "
                              "from", self.cluster)
                    return
                log.info("shipping the committed log of %s's primary at %s", self.cluster, ",".join(record.peer))
                self._shipping = task = asyncio.create_task(self.shipper.run(), name="ship")
                task.add_done_callback(self._shipping_done)
            return
        if self._shipping is not None:
            task, self._shipping = self._shipping, None
            task.cancel()
        if record.role is DrRole.PRIMARY and record.generation and record.peer:
            if self.fencer is None or self.fencer.peer != list(record.peer) or \
                    self.fencer.mine.generation != record.generation:
                self._stop_fencing()
                self.fencer = Fencer(record.peer, self.activation.info(record))
                self._fencing = asyncio.create_task(self.fencer.run(), name="fence")
        else:
            # A primary of generation 0 has a plain standby as its peer: nothing to fence.
            # A fenced site tells nobody anything.
            self._stop_fencing()

    def _replace_shipper(self, peer: Sequence[str]) -> None:
        """Ship from `peer` from now on: the old shipper stops (and closes) in the background."""
        task, self._shipping = self._shipping, None
        old, self.shipper = self.shipper, Shipper(peer, self.site_members, heartbeat=self.heartbeat)
        self.activation.shipper = self.shipper

        async def retire() -> None:
            if task is not None:
                await cancel_and_wait(task)
            await old.close()
        retiring = asyncio.create_task(retire(), name="ship-retire")
        self._retiring.add(retiring)
        retiring.add_done_callback(self._retiring.discard)

    def _stop_fencing(self) -> None:
        task, self._fencing = self._fencing, None
        if task is not None:
            task.cancel()
        self.fencer = None

    def _shipping_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        err = task.exception()
        if err is not None and self._failure is None:
            self._failure = err
            self._failed.set()
