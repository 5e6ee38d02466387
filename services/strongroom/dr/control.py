"""`DrControl`: what the DR service does at its site, as the site's DR record says.

- standby: ship the primary's committed log to this site's set (`Shipper`);
- primary (this site was activated): tell the old primary it is superseded (`Fencer`);
- fenced: nothing (an operator demotes the site).

It follows the record in the site's etcd, so an activation (by this service) or a demotion (by
an operator) changes what it does without a restart, and it serves `DrService` (`server.py`):
the status, and the activation (`Activation`).
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
        self.shipper = Shipper(record.peer, self.site_members, heartbeat=heartbeat)
        self.activation = Activation(etcd, cluster, default, self.shipper, self.stop_shipping, self.site_members)
        self.fencer: Fencer | None = None
        self._shipping: asyncio.Task[None] | None = None
        self._fencing: asyncio.Task[None] | None = None
        self._following: asyncio.Task[None] | None = None

    @property
    def state(self) -> str:
        """"shipping", "primary" (activated: fencing the old primary) or "fenced"."""
        if self.record.role is DrRole.STANDBY:
            return "shipping"
        return self.record.role.value

    def start(self) -> None:
        """Act on the record, and follow it."""
        self._apply(self.record)
        self._following = asyncio.create_task(self._follow(), name="dr-record")

    def failed(self) -> BaseException | None:
        """Why shipping stopped for good (the sites hold different histories), if it did."""
        task = self._shipping
        if task is None or not task.done() or task.cancelled():
            return None
        return task.exception()

    def done(self) -> asyncio.Task[None] | None:
        """The shipping task, to wait on (None while not shipping)."""
        return self._shipping

    def status(self) -> ShipStatus:
        return self.shipper.status()

    async def activate(self, force: bool) -> TailLoss:
        return await self.activation.activate(force)

    async def stop_shipping(self) -> None:
        task, self._shipping = self._shipping, None
        if task is not None:
            await cancel_and_wait(task)

    async def close(self) -> None:
        for task in (self._following, self._fencing):
            if task is not None:
                await cancel_and_wait(task)
        await self.stop_shipping()
        await self.shipper.close()

    async def _follow(self) -> None:
        async for kind, kv in self.etcd.follow(dr_key(self.cluster)):
            record = DrRecord.from_bytes(kv.value, kv.mod_revision) if kind == "PUT" else self.default
            old, self.record = self.record, record
            if (record.role, record.generation) != (old.role, old.generation):
                log.warning("cluster %s at this site: %s -> %s", self.cluster, old.describe(), record.describe())
                self._apply(record)

    def _apply(self, record: DrRecord) -> None:
        if record.role is DrRole.STANDBY:
            if self._shipping is None:
                self._shipping = asyncio.create_task(self.shipper.run(), name="ship")
            return
        if self._shipping is not None:
            task, self._shipping = self._shipping, None
            task.cancel()
        if record.role is DrRole.PRIMARY and record.generation and record.peer and self._fencing is None:
            self.fencer = Fencer(record.peer, self.activation.info(record))
            self._fencing = asyncio.create_task(self.fencer.run(), name="fence")
