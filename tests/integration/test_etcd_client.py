"""The etcd client against a real etcd given under two endpoints (two spellings of one server,
as a cluster of three is given in production): a call that times out moves the client to the next
endpoint and closes the channel it was on, which cancels every other call still on that channel.
Those calls must go again on the channel in force, not end as if their caller had been cancelled
(the member's lease keeper or leader task would stop silently)."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from strongroom.etcd import EtcdClient, EtcdUnavailable
from strongroom.local.etcdproc import EtcdProcess


async def test_calls_on_a_channel_closed_by_another_calls_rotation_go_again(fresh_etcd: EtcdProcess) -> None:
    port = fresh_etcd.endpoint.rsplit(":", 1)[1]
    client = EtcdClient([f"127.0.0.1:{port}", f"localhost:{port}"], timeout=1.0)
    try:
        await client.put("/t/k", b"v")
        lease = await client.grant(30)
        os.kill(fresh_etcd.pid, signal.SIGSTOP)  # calls hang until their deadline
        try:
            first = asyncio.create_task(client.get("/t/k"))
            await asyncio.sleep(0.5)
            # On the same channel as `first`, which times out first and rotates.
            channel = client._channel
            second = asyncio.create_task(client.get("/t/k"))
            keepalive = asyncio.create_task(client.keepalive_once(lease, timeout=5.0))
            for _ in range(100):  # `first` times out at 1.0 s: its rotation closes the channel
                if client._channel is not channel:
                    break
                await asyncio.sleep(0.05)
            assert client._channel is not channel, "no rotation"
            await asyncio.sleep(0.1)
        finally:
            os.kill(fresh_etcd.pid, signal.SIGCONT)
        got = await asyncio.wait_for(second, 10)
        assert got is not None and got.value == b"v"
        got = await asyncio.wait_for(first, 10)
        assert got is not None and got.value == b"v"
        # The keep-alive cut by the rotation is a missed refresh, which its keeper repeats.
        with pytest.raises(EtcdUnavailable, match="rotation"):
            await asyncio.wait_for(keepalive, 10)
        assert await client.keepalive_once(lease) > 0
    finally:
        await client.close()
