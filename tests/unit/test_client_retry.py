"""The client's one retry policy and error mapping, in-process: what a failed call means, how
long to wait between attempts, and the loop every call goes through (`Connection.call_leader`)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from strongroom.client import AckMode, DurableKind, RetryPolicy
from strongroom.client.connection import Connection
from strongroom.client.retry import error_from_rpc, unreachable
from strongroom.errors import (
    ConnectionFailed,
    InvalidArgument,
    KeyExists,
    KeyNotFound,
    NoLeaderError,
    NotLeaderError,
    OriginGap,
    RpcFailed,
    StrongroomError,
    SubscriptionClosed,
    SubscriptionReplaced,
    UnknownDestination,
    VersionMismatch,
    error_for_reason,
)
from strongroom.grpcerrors import LEADER_METADATA_KEY, to_status


class FakeRpcError(grpc.RpcError, grpc.Call):  # type: ignore[misc]
    """A failed call as grpc raises it: a status code, details and trailing metadata."""

    def __init__(self, code: grpc.StatusCode, details: str = "",
                 trailers: tuple[tuple[str, str | bytes], ...] = ()) -> None:
        self._code, self._details, self._trailers = code, details, trailers

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return self._trailers

    def initial_metadata(self) -> tuple[()]:
        return ()

    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> None:
        return None

    def cancel(self) -> bool:
        return False

    def add_callback(self, callback: object) -> bool:
        return False


def refused(err: StrongroomError) -> FakeRpcError:
    """The failed call a member's refusal with `err` arrives as."""
    status = to_status(err)
    return FakeRpcError(status.code, status.details, tuple(status.trailing_metadata))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# --- what a failed call means ----------------------------------------------------------------------


def test_a_refusal_becomes_the_strongroom_error_it_carries() -> None:
    err = error_from_rpc(refused(UnknownDestination("no destination matches 'x'")), "127.0.0.1:1")
    assert type(err) is UnknownDestination and not err.retriable
    assert err.message == "no destination matches 'x'"


def test_not_leader_keeps_the_leader_address_from_the_trailer() -> None:
    call = refused(NotLeaderError("not me", "m2", "127.0.0.1:2"))
    assert (LEADER_METADATA_KEY, "127.0.0.1:2") in call.trailing_metadata()
    err = error_from_rpc(call)
    assert isinstance(err, NotLeaderError) and err.retriable and err.leader_address == "127.0.0.1:2"


@pytest.mark.parametrize("code", [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                                  grpc.StatusCode.CANCELLED, grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL])
def test_a_transport_failure_is_a_retriable_connection_failure_naming_the_member(code: grpc.StatusCode) -> None:
    err = error_from_rpc(FakeRpcError(code, "connection refused"), "127.0.0.1:7")
    assert type(err) is ConnectionFailed and err.retriable
    assert err.message == f"{code.name} from 127.0.0.1:7: connection refused"
    assert err.metadata == {"grpc_code": code.name, "address": "127.0.0.1:7"}


@pytest.mark.parametrize("code", [grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.PERMISSION_DENIED,
                                  grpc.StatusCode.INVALID_ARGUMENT])
def test_another_status_without_a_reason_is_not_retriable(code: grpc.StatusCode) -> None:
    err = error_from_rpc(FakeRpcError(code, "nope"))
    assert type(err) is RpcFailed and not err.retriable and err.message == f"{code.name}: nope"


def test_client_side_errors_are_in_the_one_table() -> None:
    for cls, retriable in ((KeyNotFound, False), (VersionMismatch, False), (KeyExists, False),
                           (ConnectionFailed, True), (RpcFailed, False), (SubscriptionClosed, False)):
        err = error_for_reason(cls.reason, "m", {"k": "v"})
        assert type(err) is cls and err.retriable is retriable and err.metadata == {"k": "v"}
    assert issubclass(KeyExists, VersionMismatch)
    assert issubclass(SubscriptionReplaced, SubscriptionClosed) and SubscriptionReplaced.reason == "REPLACED"


# --- the policy ------------------------------------------------------------------------------------


def test_delays_grow_to_the_cap_and_stop_at_the_deadline() -> None:
    clock = Clock()
    outage = RetryPolicy(timeout=2.0, initial_delay=0.1, max_delay=0.4).outage(clock=clock)
    delays = []
    while (delay := outage.next_delay()) is not None:
        delays.append(delay)
        clock.now += delay
    assert delays[:4] == [0.1, 0.2, 0.4, 0.4]
    assert sum(delays) <= 2.0 < sum(delays) + 0.4  # the next wait would pass the deadline


def test_a_redirect_starts_the_waits_small_again_without_moving_the_deadline() -> None:
    clock = Clock()
    outage = RetryPolicy(timeout=1.0, initial_delay=0.1, max_delay=0.8).outage(clock=clock)
    assert [outage.next_delay(), outage.next_delay()] == [0.1, 0.2]
    outage.redirected()
    assert outage.next_delay() == 0.1
    clock.now += 0.95
    assert outage.next_delay() is None


def test_a_stream_outage_clock_starts_at_its_first_failure_and_again_after_progress() -> None:
    clock = Clock()
    outage = RetryPolicy(timeout=1.0, initial_delay=0.1).outage(started=False, clock=clock)
    clock.now += 50  # hours of a healthy stream do not count
    assert outage.next_delay() == 0.1
    clock.now += 0.95
    outage.progress()  # something was confirmed: the outage is over
    clock.now += 0.5
    assert outage.next_delay() == 0.1
    clock.now += 0.95
    assert outage.next_delay() is None


# --- the loop every call goes through ---------------------------------------------------------------


def connection(timeout: float = 0.3) -> Connection:
    return Connection("127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", RetryPolicy(timeout=timeout, initial_delay=0.01))


async def test_call_leader_follows_a_redirect_at_once_and_remembers_the_leader() -> None:
    conn = connection()
    calls: list[str] = []

    async def attempt(address: str) -> str:
        calls.append(address)
        if address != "127.0.0.1:3":
            raise refused(NotLeaderError("not me", "m3", "127.0.0.1:3"))
        return "done"

    assert await conn.call_leader(attempt) == "done"
    assert calls == ["127.0.0.1:1", "127.0.0.1:3"]
    assert conn.candidate() == "127.0.0.1:3"


async def test_call_leader_raises_a_refusal_at_once() -> None:
    conn = connection()
    calls = 0

    async def attempt(address: str) -> None:
        nonlocal calls
        calls += 1
        raise refused(UnknownDestination("no"))

    with pytest.raises(UnknownDestination):
        await conn.call_leader(attempt)
    assert calls == 1


async def test_call_leader_hands_a_gap_back_at_once_though_it_is_retriable() -> None:
    """ORIGIN_GAP is retriable once the caller sent what the gap misses: retrying the same call
    by itself would only get the same answer until the outage timeout."""
    conn = connection()
    calls = 0

    async def attempt(address: str) -> None:
        nonlocal calls
        calls += 1
        raise refused(OriginGap("origin 'london' sequence 5 follows 4, but this cluster holds up to 2"))

    with pytest.raises(OriginGap) as caught:
        await conn.call_leader(attempt)
    assert calls == 1 and caught.value.retriable and caught.value.caller_retries
    assert "holds up to 2" in caught.value.message


async def test_call_leader_rides_out_transport_failures_on_other_members() -> None:
    conn = connection()
    calls: list[str] = []

    async def attempt(address: str) -> int:
        calls.append(address)
        if len(calls) < 3:
            raise FakeRpcError(grpc.StatusCode.UNAVAILABLE, "down")
        return len(calls)

    assert await conn.call_leader(attempt) == 3
    assert calls == ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]


def test_a_failure_forgets_the_leader_and_not_leader_names_the_next() -> None:
    conn = connection()
    conn.note_leader("127.0.0.1:2")
    assert conn.candidate() == "127.0.0.1:2"
    assert conn.note_failure("127.0.0.1:2", None) is False
    assert conn.candidate() == "127.0.0.1:1"  # back to the endpoints in turn
    assert conn.note_failure("127.0.0.1:1", NotLeaderError("", "m2", "127.0.0.1:2")) is True
    assert conn.candidate() == "127.0.0.1:2"


async def test_call_leader_gives_up_with_no_leader_and_never_leaks_a_grpc_error() -> None:
    conn = connection(timeout=0.2)

    async def attempt(address: str) -> None:
        raise FakeRpcError(grpc.StatusCode.UNAVAILABLE, "down")

    started = asyncio.get_running_loop().time()
    with pytest.raises(NoLeaderError, match="no leader reachable within") as info:
        await conn.call_leader(attempt)
    assert 0.1 < asyncio.get_running_loop().time() - started < 2.0
    assert not isinstance(info.value, grpc.RpcError) and "UNAVAILABLE" in info.value.message


# --- a cluster nobody can reach ---------------------------------------------------------------------

REFUSED = ("failed to connect to all addresses; last error: UNKNOWN: ipv4:{0}: Failed to connect to remote "
           "host: connect: Connection refused (111)")


def not_reached(address: str) -> FakeRpcError:
    """The failed call of a member whose port refuses the connection, as grpc raises it."""
    return FakeRpcError(grpc.StatusCode.UNAVAILABLE, REFUSED.format(address))


def test_what_counts_as_unreachable() -> None:
    assert unreachable(error_from_rpc(not_reached("127.0.0.1:1"), "127.0.0.1:1")) == "connection refused"
    dns = FakeRpcError(grpc.StatusCode.UNAVAILABLE, "errors resolving m1.gone:7101: Domain name not found")
    assert unreachable(error_from_rpc(dns, "m1.gone:7101")) == "name not resolved"
    # Reached, then lost, or an answer: not "unreachable".
    assert unreachable(error_from_rpc(FakeRpcError(grpc.StatusCode.UNAVAILABLE, "Socket closed"))) is None
    assert unreachable(error_from_rpc(FakeRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, "Connection refused"))) is None
    assert unreachable(error_from_rpc(refused(NoLeaderError("no leader")))) is None


def test_the_unreachable_clock_runs_only_while_no_member_answers() -> None:
    clock = Clock()
    policy = RetryPolicy(timeout=30.0, unreachable_timeout=5.0)
    outage = policy.outage(clock=clock)
    members = ["a:1", "b:2"]
    down = {a: error_from_rpc(not_reached(a), a) for a in members}
    outage.failed("a:1", down["a:1"])
    clock.now += 6
    assert outage.unreachable_error(members) is None  # b:2 not tried yet
    outage.failed("b:2", down["b:2"])
    err = outage.unreachable_error(members)
    assert isinstance(err, ConnectionFailed) and err.retriable
    assert err.message == "no member could be reached for 6.0 s: a:1 (connection refused), b:2 (connection refused)"
    assert err.metadata == {"addresses": "a:1,b:2", "unreachable": "true"}
    outage.failed("a:1", error_from_rpc(refused(NoLeaderError("no leader")), "a:1"))  # a member answered
    outage.failed("a:1", down["a:1"])
    clock.now += 4.9
    assert outage.unreachable_error(members) is None  # silent for 4.9 s only
    assert outage.unreachable_error(members, final=True) is not None  # giving up anyway: say why
    clock.now += 0.1
    assert outage.unreachable_error(members) is not None
    outage.progress()
    assert outage.unreachable_error(members) is None


async def test_no_member_reachable_fails_fast_naming_every_address() -> None:
    conn = Connection("127.0.0.1:1,127.0.0.1:2,127.0.0.1:3",
                      RetryPolicy(timeout=30.0, unreachable_timeout=0.3, initial_delay=0.01))

    async def attempt(address: str) -> None:
        raise not_reached(address)

    started = asyncio.get_running_loop().time()
    with pytest.raises(ConnectionFailed) as info:
        await conn.call_leader(attempt)
    assert 0.3 <= asyncio.get_running_loop().time() - started < 3.0
    assert info.value.retriable
    assert info.value.message.startswith("no member could be reached for 0.")
    assert info.value.message.endswith(": 127.0.0.1:1 (connection refused), 127.0.0.1:2 (connection refused), "
                                       "127.0.0.1:3 (connection refused)")


async def test_a_member_that_answers_keeps_waiting_for_a_leader() -> None:
    conn = Connection("127.0.0.1:1,127.0.0.1:2,127.0.0.1:3",
                      RetryPolicy(timeout=1.0, unreachable_timeout=0.1, initial_delay=0.01, max_delay=0.05))

    async def attempt(address: str) -> None:
        if address == "127.0.0.1:2":
            raise refused(NoLeaderError("cluster c has no leader at the moment"))  # up, electing
        raise not_reached(address)

    started = asyncio.get_running_loop().time()
    with pytest.raises(NoLeaderError):
        await conn.call_leader(attempt)
    assert asyncio.get_running_loop().time() - started >= 0.9  # the whole timeout, not 0.1 s


async def test_every_member_down_for_a_moment_is_ridden_out() -> None:
    conn = Connection("127.0.0.1:1,127.0.0.1:2", RetryPolicy(timeout=30.0, unreachable_timeout=1.0,
                                                             initial_delay=0.01, max_delay=0.05))
    loop = asyncio.get_running_loop()
    back = loop.time() + 0.4

    async def attempt(address: str) -> str:
        if loop.time() < back:
            raise not_reached(address)
        return address

    assert await conn.call_leader(attempt) in conn.endpoints


async def test_a_publish_to_a_cluster_nobody_can_reach_says_where_it_looked() -> None:
    import socket

    from strongroom.client import Client

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    client = Client(address, retry=RetryPolicy(timeout=30.0, unreachable_timeout=0.3))
    try:
        with pytest.raises(ConnectionFailed) as info:
            await asyncio.wait_for(client.publish("orders", b"x"), timeout=10)
    finally:
        await client.close()
    assert f"{address} (connection refused)" in info.value.message and info.value.retriable


# --- enums ------------------------------------------------------------------------------------------


def test_durable_kinds_and_ack_modes_are_str_enums() -> None:
    assert DurableKind.parse("shared") is DurableKind.SHARED == "shared"
    assert DurableKind.parse("last-value") is DurableKind.parse("lastvalue") is DurableKind.LAST_VALUE
    assert AckMode.parse("auto") is AckMode.AUTO and AckMode.EXPLICIT == "explicit"
    with pytest.raises(InvalidArgument, match="unknown durable kind 'sideways'"):
        DurableKind.parse("sideways")
    with pytest.raises(InvalidArgument, match="unknown ack mode 'never'"):
        AckMode.parse("never")


async def test_new_endpoints_move_the_calls_and_forget_a_leader_that_is_not_among_them() -> None:
    """A member moved (the router follows the registrations): the next calls go to the new
    addresses, a leader no longer listed is forgotten, its channel is handed back to close."""
    conn = Connection(["a:1", "b:2", "c:3"], RetryPolicy(timeout=1.0))
    old = conn.channel("a:1")
    conn.channel("b:2")
    conn.note_leader("a:1")
    assert conn.set_endpoints(["b:2", "c:3"]) == [old]
    await old.close()
    assert conn.endpoints == ["b:2", "c:3"]
    assert {conn.candidate() for _ in range(4)} == {"b:2", "c:3"}  # a:1 no longer the leader
    conn.note_leader("c:3")
    assert conn.set_endpoints("b:2,c:3") == []  # unchanged: the leader stays
    assert conn.candidate() == "c:3"
    assert conn.set_endpoints(["b:2", "d:4"]) == []  # no channel to c:3 was opened
    assert {conn.candidate() for _ in range(4)} == {"b:2", "d:4"}
    with pytest.raises(InvalidArgument):
        conn.set_endpoints([])
    assert conn.endpoints == ["b:2", "d:4"]
    await conn.close()


async def test_a_call_cut_by_the_clients_close_fails_at_once_and_opens_nothing_again() -> None:
    """`close` closes the channels, which cancels the calls on them under their tasks: such a
    cancellation is otherwise retried as a broken connection (a dropped address), but after
    `close` there is nothing to retry on: the call fails (its outcome unknown) and no channel
    is opened again. A real gRPC server in-process that never answers."""
    from strongroom.errors import PersistenceUnavailable
    from strongroom.security import tls

    never = asyncio.Event()

    async def hang(request: bytes, context: object) -> bytes:
        await never.wait()
        return b""

    handler = grpc.method_handlers_generic_handler("t.T", {"U": grpc.unary_unary_rpc_method_handler(hang)})
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    before = tls.current()
    tls.use(None)
    try:
        conn = Connection([f"127.0.0.1:{port}"], RetryPolicy(timeout=30))

        async def attempt(address: str) -> bytes:
            return await conn.channel(address).unary_unary("/t.T/U")(b"")  # type: ignore[no-any-return]

        call = asyncio.create_task(conn.call_leader(attempt))
        await asyncio.sleep(0.3)
        assert not call.done()
        await conn.close()
        with pytest.raises(PersistenceUnavailable, match="closed"):
            await asyncio.wait_for(call, 5)
        assert conn._channels == {}, "a channel was opened again after close"
        with pytest.raises(InvalidArgument, match="closed"):
            conn.channel(f"127.0.0.1:{port}")
    finally:
        tls.use(before)
        await server.stop(None)
