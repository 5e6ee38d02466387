"""The DR generation carried to clients (docs/dr.md, "Clients carry the generation"), on two real
sites (each its own etcd and three members) and the real `strongroom-dr`.

The standby site reads the primary through proxies that the test cuts, so the activation
happens while the old primary runs on, cut off from the site that superseded it and never told
(its leader stays, so it does not ask the other site either). A client that has talked to the
new primary then reaches the old one: its call names generation 1, the old primary refuses it
with FENCED and stores nothing, asks the other site at once, and fences itself.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from dr_sites import Sites, grid
from harness import wait_for

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import messaging_pb2 as mpb
from strongroom.api.v1 import messaging_pb2_grpc as mgrpc
from strongroom.channels import CHANNEL_OPTIONS, open_channel
from strongroom.chaos.netproxy import Network
from strongroom.client import Client
from strongroom.dr.transport import activate_at, dr_status
from strongroom.errors import Fenced, StrongroomError
from strongroom.grpcerrors import GENERATION_METADATA_KEY, from_rpc_error

pytestmark = pytest.mark.slow

QUEUE = "dr.queue"


async def _publish_raw(address: str, body: bytes, metadata: tuple[tuple[str, str], ...] | None) -> tuple[
        mpb.PublishResponse | None, StrongroomError | None, tuple[tuple[str, str], ...]]:
    """A unary Publish through a plain stub, as a client of another language makes it: the
    answer or the error, and the answer's trailing metadata."""
    async with open_channel(address, CHANNEL_OPTIONS) as channel:
        call = mgrpc.MessagingServiceStub(channel).Publish(
            mpb.PublishRequest(destination=QUEUE, message=cpb.Message(body=body)), timeout=10, metadata=metadata)
        try:
            response = await call
        except grpc.aio.AioRpcError as exc:
            return None, from_rpc_error(exc), tuple(exc.trailing_metadata() or ())
        return response, None, tuple(await call.trailing_metadata() or ())


async def test_a_client_that_saw_the_newer_primary_fences_the_old_one(tmp_path: Path) -> None:
    network = Network(dict, tmp_path / "net.log")
    proxies = []

    def via(addresses: list[str]) -> list[str]:
        proxies.extend(network.proxy(f"to-{i}", address) for i, address in enumerate(addresses))
        return [p.endpoint for p in proxies]

    sites = Sites(tmp_path, standby_addresses=True, primary_via=via)
    try:
        sites.start()
        old_leader = await sites.primary.leader()
        await sites.standby.leader()
        async with Client(sites.primary.addresses(), timeout=30) as client:
            await client.publish(QUEUE, b"first")
            assert client.connection.generation == 0 and client.connection.metadata is None

        async def shipping() -> bool:
            try:
                st = await dr_status(sites.dr_address)
            except StrongroomError:
                return False
            return bool(st.primary_member) and st.primary_commit_index > 0 and st.entries_behind == 0
        await wait_for(shipping, timeout=60)

        # The standby site loses the primary (the old primary runs on, and hears of nothing).
        for proxy in proxies:
            proxy.cut()

        async def activated() -> bool:
            try:
                return (await activate_at(sites.dr_address, "default")).generation == 1
            except StrongroomError:  # PRIMARY_HEALTHY until the stream goes silent
                return False
        await wait_for(activated, timeout=60)

        async with Client(sites.standby.addresses(), timeout=30) as new:
            await new.publish(QUEUE, b"at the new primary")
            assert new.connection.generation == 1
            seen = new.connection.metadata
        assert seen == ((GENERATION_METADATA_KEY, "1"),)

        # Nobody told the old primary: it serves a call that names no generation (and names none
        # itself: generation 0).
        address = sites.primary.address(old_leader)
        st = await sites.primary.status(old_leader)
        assert st is not None and st.dr_role == "primary" and st.generation == 0, st
        response, err, trailing = await _publish_raw(address, b"names no generation", None)
        assert err is None and response is not None and response.confirmed, err
        assert GENERATION_METADATA_KEY not in dict(trailing)

        # The client that saw generation 1: refused before anything is stored; the old site asks
        # the other one and fences itself.
        before = grid(await sites.primary.status(old_leader))
        response, err, _ = await _publish_raw(address, b"must not be stored", seen)
        assert isinstance(err, Fenced) and err.metadata["generation"] == "1", (response, err)

        async def fenced() -> bool:
            states = [await sites.primary.status(n) for n in sites.primary.names]
            return all(s is not None and s.dr_role == "fenced" and s.newer_generation == 1 for s in states)
        await wait_for(fenced, timeout=30)
        assert grid(await sites.primary.status(await sites.primary.leader())) == before

        # Fenced: every write is refused now, whoever calls.
        response, err, _ = await _publish_raw(address, b"not after fencing either", None)
        assert isinstance(err, Fenced), (response, err)
    except BaseException:
        print(sites.logs())
        raise
    finally:
        sites.stop()
        network.close()
