"""The records of tokens that ended are kept for a while, then deleted: a real etcd, two books
(the realm service's, and a member's that follows it)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from harness import wait_for

from strongroom.errors import Unauthenticated
from strongroom.etcd import EtcdClient
from strongroom.keys import token_key
from strongroom.security.tokens import ENDED_KEPT_SECONDS, TokenBook


async def test_ended_tokens_are_told_apart_for_a_while_then_pruned_everywhere(fresh_etcd) -> None:  # type: ignore[no-untyped-def]
    etcd = EtcdClient(fresh_etcd.endpoint)
    service, member = TokenBook(etcd), TokenBook(EtcdClient(fresh_etcd.endpoint))
    following = asyncio.create_task(member.follow())
    try:
        user = f"u-{uuid.uuid4().hex[:6]}"
        live, live_rec = await service.issue(user, 0, "never ends")
        short, short_rec = await service.issue(user, 1, "ends in a second")
        revoked, revoked_rec = await service.issue(user, 3600, "revoked at once")
        revoked_rec = await service.revoke(revoked_rec.id)
        forever, _ = await service.issue(user, 7 * 86400, "ends in a week")

        async def followed() -> bool:
            return len(member.records) == 4

        await wait_for(followed)
        now = time.time() + 2
        # Just ended: refused with the reason, and nothing is pruned yet.
        with pytest.raises(Unauthenticated) as exc:
            member.verify(revoked)
        assert exc.value.metadata["refusal"] == "token_revoked"
        assert await service.prune(now) == []
        # Past the time ended records are kept: the expired and the revoked one go, from etcd and
        # from the book that follows it; the live ones stay.
        later = short_rec.expires_at + ENDED_KEPT_SECONDS
        assert await service.prune(later) == sorted([short_rec.id, revoked_rec.id])
        assert await etcd.get(token_key(short_rec.id)) is None
        assert await etcd.get(token_key(revoked_rec.id)) is None

        async def dropped() -> bool:
            return set(member.records) == {live_rec.id, forever.split("_")[1]}

        await wait_for(dropped)
        with pytest.raises(Unauthenticated) as exc:
            member.verify(short)
        assert exc.value.metadata["refusal"] == "token_unknown"
        assert member.verify(live).user == user
        assert member.verify(forever).user == user
    finally:
        following.cancel()
        await asyncio.gather(following, return_exceptions=True)
