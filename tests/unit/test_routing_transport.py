"""The router-to-router transport behind a Service that balances connections, not calls (as
kube-proxy does for the chart's router Service): a call answered NOT_ACTIVE_ROUTER by a replica
that is no longer active drops the channel, so the next call opens a new connection and reaches
the replica that is active now. Real gRPC servers and channels on loopback; the "Service" is a
TCP proxy that sends each new connection to the pod it selects at that moment."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass, field

import grpc
import pytest

from strongroom.api.v1 import router_pb2 as rpb
from strongroom.api.v1 import router_pb2_grpc as rgrpc
from strongroom.errors import NotActiveRouter
from strongroom.routing.interest import ClusterInterest
from strongroom.routing.servicer import RouterServicer
from strongroom.security.guard import Guard
from strongroom.routing.transport import GrpcLinks
from strongroom.channels import add_port
from strongroom.security import tls
from strongroom.security.identity import Kind


@pytest.fixture(autouse=True)
def _as_london_router() -> object:
    """This process plays london's router (the replicas' servers take only routers of their
    neighbours), with a certificate of the test session's authority."""
    from harness import tls_as

    before = tls.current()
    tls.use(tls_as(Kind.ROUTER, "r1", "london"))
    yield
    tls.use(before)


@dataclass
class Receiver:
    """Answers every batch at once (and keeps their ids)."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    async def forward(self, batches: AsyncIterable[rpb.ForwardBatch]) -> AsyncIterator[rpb.ForwardAck]:
        async for batch in batches:
            self.batches.append(batch.batch_id)
            yield rpb.ForwardAck(batch_id=batch.batch_id)


@dataclass
class Replica:
    """What RouterServicer asks of the router, for one replica (pod) of cluster rio."""

    pod: str
    active: bool
    cluster: str = "rio"
    receiver: Receiver = field(default_factory=Receiver)
    exchanges: int = 0

    def require_active(self) -> None:
        if not self.active:
            raise NotActiveRouter(f"router replica {self.pod} of rio is not the active router")

    def neighbours(self) -> list[str]:
        return ["london"]

    def exchange(self, from_cluster: str, records: list[ClusterInterest]) -> list[ClusterInterest]:
        self.exchanges += 1
        return []


class Service:
    """A TCP proxy: each new connection goes to the pod selected when it opens, and stays there."""

    def __init__(self) -> None:
        self.target = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._connect, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(src, dst))
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)

    @staticmethod
    async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            dst.close()

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)


async def _serve(replica: Replica) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server()
    # Status is not asked here; no realm, so the guard checks nothing.
    rgrpc.add_RouterServiceServicer_to_server(RouterServicer(replica, Guard(lambda: None, None)), server)  # type: ignore[arg-type]
    port = add_port(server, "127.0.0.1:0")
    await server.start()
    return server, port


@dataclass
class Pods:
    """Replica a (active) and b (standby) of rio, each a real gRPC server, behind one Service."""

    a: Replica
    b: Replica
    service: Service
    links: GrpcLinks
    port_b: int

    def move_to_b(self) -> None:
        """The election moves to b while a keeps running: b labels its pod and a removes its
        label, so the Service selects b's pod for new connections."""
        self.a.active, self.b.active, self.service.target = False, True, self.port_b


@pytest.fixture
async def pods() -> AsyncIterator[Pods]:
    a, b = Replica("rio-router-a", active=True), Replica("rio-router-b", active=False)
    (server_a, port_a), (server_b, port_b) = await _serve(a), await _serve(b)
    service = Service()
    await service.start()
    service.target = port_a
    links = GrpcLinks(lambda neighbour: f"127.0.0.1:{service.port}")
    try:
        yield Pods(a, b, service, links, port_b)
    finally:
        await links.close()
        await service.stop()
        await server_a.stop(None)
        await server_b.stop(None)


BATCH = {"from_cluster": "london", "destination": "prices.eur"}


async def test_an_exchange_refused_by_a_replica_no_longer_active_reconnects_to_the_active_one(pods: Pods) -> None:
    request = rpb.InterestExchange(from_cluster="london")
    await pods.links.exchange("rio", request)
    assert (pods.a.exchanges, pods.b.exchanges) == (1, 0)
    pods.move_to_b()
    with pytest.raises(NotActiveRouter):
        await pods.links.exchange("rio", request)  # the open connection stays with a
    await pods.links.exchange("rio", request)  # a new connection: through the Service to b
    await pods.links.exchange("rio", request)
    assert (pods.a.exchanges, pods.b.exchanges) == (1, 2)


async def test_a_forward_stream_refused_by_a_replica_no_longer_active_reconnects_to_the_active_one(
        pods: Pods) -> None:
    link = await pods.links.open_forward("rio")
    await link.send(rpb.ForwardBatch(batch_id=1, **BATCH))
    ack = await link.receive()
    assert ack is not None and ack.batch_id == 1
    link.close()
    pods.move_to_b()
    refused = await pods.links.open_forward("rio")
    with pytest.raises(NotActiveRouter):
        await refused.send(rpb.ForwardBatch(batch_id=1, **BATCH))
        await refused.receive()
    refused.close()
    link = await pods.links.open_forward("rio")  # a new connection, to b
    await link.send(rpb.ForwardBatch(batch_id=2, **BATCH))
    ack = await link.receive()
    assert ack is not None and ack.batch_id == 2
    link.close()
    await pods.links.exchange("rio", rpb.InterestExchange(from_cluster="london"))
    assert (pods.a.exchanges, pods.b.exchanges) == (0, 1)


async def test_a_forward_stream_whose_channel_is_closed_under_it_fails_as_a_broken_stream(pods: Pods) -> None:
    """An exchange refused NOT_ACTIVE_ROUTER closes the neighbour's channel (after a grace), and
    with it a Forward stream still open on it: gRPC cancels the call under the route's reader,
    which must see a broken stream (the session ends and resumes from the marks), not its own
    cancellation (it would end silently, and the writer wait for answers forever)."""
    from strongroom.errors import ConnectionFailed

    link = await pods.links.open_forward("rio")
    await link.send(rpb.ForwardBatch(batch_id=1, **BATCH))
    ack = await link.receive()
    assert ack is not None and ack.batch_id == 1
    waiting = asyncio.create_task(link.receive())  # nothing more was sent: no answer comes
    pods.move_to_b()
    with pytest.raises(NotActiveRouter):
        await pods.links.exchange("rio", rpb.InterestExchange(from_cluster="london"))
    with pytest.raises(ConnectionFailed, match="ended"):
        await asyncio.wait_for(waiting, 10)
    with pytest.raises(ConnectionFailed):
        await link.send(rpb.ForwardBatch(batch_id=2, **BATCH))
    # The route's own stop stays a cancellation.
    link = await pods.links.open_forward("rio")
    stopping = asyncio.create_task(link.receive())
    await asyncio.sleep(0.2)
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    link.close()


async def test_only_the_router_of_a_neighbour_cluster_may_exchange_interest_or_forward() -> None:
    from harness import tls_as

    from strongroom.channels import open_channel
    from strongroom.errors import PermissionDenied
    from strongroom.grpcerrors import from_rpc_error

    replica = Replica("rio-router-a", active=True)
    server, port = await _serve(replica)
    try:
        for who, claimed, says in ((tls_as(Kind.MEMBER, "m1", "london"), "london", "not member/london/m1"),
                                   (tls_as(Kind.ROUTER, "r1", "tokyo"), "london", "not router/tokyo/r1"),
                                   (tls_as(Kind.ROUTER, "r1", "tokyo"), "", "not router/tokyo/r1")):
            async with open_channel(f"127.0.0.1:{port}", [], tls=who) as channel:
                stub = rgrpc.RouterServiceStub(channel)
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    if claimed:
                        await stub.ExchangeInterest(rpb.InterestExchange(from_cluster=claimed), timeout=5)
                    else:
                        async for _ in stub.Forward(iter([rpb.ForwardBatch()]), timeout=5):
                            pass
                err = from_rpc_error(info.value)
                assert isinstance(err, PermissionDenied) and err.metadata["permission"] == "route"
                assert says in err.message
        assert replica.exchanges == 0 and replica.receiver.batches == []
    finally:
        await server.stop(None)
