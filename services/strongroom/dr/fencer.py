"""`Fencer`: an activated site's DR service keeps telling the old primary that it is superseded.

After an activation the old primary site may come back at any time (its disk and etcd
survived). Its members ask the other site before their first write (`DrSite.superseded_by_peer`),
and this closes what that cannot: a primary that was only cut off, never stopped, learns of the
newer generation as soon as it can be reached again, and fences itself. The fencer asks every
`FENCE_INTERVAL` seconds for as long as it runs, and remembers the old primary's last answer for
`DrService.Status`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.persistence.transport import compare_generations

__all__ = ["FENCE_INTERVAL", "Fencer"]

log = logging.getLogger("strongroom.dr")

FENCE_INTERVAL = 2.0
"""Seconds between two calls to the old primary."""


class Fencer:
    """Tells `peer` (the old primary's addresses) what this site, the primary of a newer
    generation, is."""

    def __init__(self, peer: Sequence[str], mine: rpb.GenerationInfo, interval: float = FENCE_INTERVAL) -> None:
        self.peer = list(peer)
        self.mine = mine
        self.interval = interval
        self.peer_role = ""
        """The old primary's role as it last answered ("" while it has not)."""

    async def run(self) -> None:
        """Until cancelled."""
        while True:
            answers = await compare_generations(self.peer, self.mine)
            if not answers and self.peer_role:
                log.warning("the old primary of %s (%s) does not answer", self.mine.cluster, ", ".join(self.peer))
                self.peer_role = ""
            for answer in answers:
                if answer.role != self.peer_role:
                    log.warning("the old primary of %s (%s) answers: %s of generation %d", self.mine.cluster,
                                answer.member, answer.role, answer.generation)
                self.peer_role = answer.role
            await asyncio.sleep(self.interval)
