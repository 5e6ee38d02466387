"""The leader's append stream against a real gRPC server (in process): a follower that went
away while the stream was idle."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.api.v1 import replication_pb2_grpc as rgrpc
from strongroom.persistence.transport import FollowerConnection
from strongroom.persistence.transport import PeerUnreachable as _AppendTimeout
from strongroom.channels import add_port


class _Follower(rgrpc.ReplicationServiceServicer):
    async def AppendStream(self, request_iterator, context):  # type: ignore[no-untyped-def]
        while True:
            request = await context.read()
            if request is grpc.aio.EOF:
                return
            await context.write(rpb.AppendResponse(ok=True, promised_epoch=request.epoch))


async def test_append_on_a_stream_that_ended_while_idle_is_a_replication_error() -> None:
    """gRPC answers a write on an ended call with asyncio.InvalidStateError, not an RPC error.
    The replicator must see it as the follower being unreachable (and reconnect); before, the
    error ended the replicator's task silently and the leader never replicated to that
    follower again (the memory-member restart test failed now and then)."""
    server = grpc.aio.server()
    rgrpc.add_ReplicationServiceServicer_to_server(_Follower(), server)
    port = add_port(server, "127.0.0.1:0")
    await server.start()
    rep = FollowerConnection("default", "m2", lambda name: f"127.0.0.1:{port}")
    try:
        assert rep.connect()
        request = rpb.AppendRequestRaw(epoch=1, leader="m1").SerializeToString()
        assert (await rep._exchange_on_stream(request)).ok
        await server.stop(None)
        stream = rep._stream
        assert stream is not None
        for _ in range(100):
            if stream.done():
                break
            await asyncio.sleep(0.02)
        assert stream.done()
        with pytest.raises(_AppendTimeout):
            await rep._exchange_on_stream(request)
    finally:
        await rep.close()
        await server.stop(None)
