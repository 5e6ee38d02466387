"""How one end of the replication link cuts what arrives into frames, whatever the sizes of the
reads the socket happens to make (the link over real sockets: tests/integration)."""

from __future__ import annotations

import asyncio
import random

import pytest

from strongroom.persistence.link import MAX_FRAME, PREAMBLE, LinkClosed, _Frames, frame


class _Transport:
    """What _Frames asks of its transport: pausing, resuming, aborting."""

    def __init__(self) -> None:
        self.paused = False
        self.aborted = False

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def abort(self) -> None:
        self.aborted = True


def _connected(**kwargs: object) -> tuple[_Frames, _Transport]:
    conn = _Frames(**kwargs)  # type: ignore[arg-type]
    transport = _Transport()
    conn.transport = transport  # type: ignore[assignment]
    return conn, transport


def _feed(conn: _Frames, data: bytes, reads: list[int]) -> None:
    """Hand `data` over as the event loop would: into the buffers the protocol offers, at most
    the next size of `reads` at a time."""
    at = 0
    sizes = iter(reads)
    while at < len(data):
        view = conn.get_buffer(-1)
        n = min(len(view), next(sizes), len(data) - at)
        assert n > 0, "the protocol offered no room while data was waiting"
        view[:n] = data[at:at + n]
        conn.buffer_updated(n)
        at += n


def _drain(conn: _Frames) -> list[bytes]:
    async def take() -> list[bytes]:
        got = []
        while conn._frames:
            got.append(bytes(await conn.next_frame()))
        return got
    return asyncio.run(take())


@pytest.mark.parametrize("seed", range(8))
def test_frames_come_out_whole_and_in_order_whatever_the_read_sizes(seed: int) -> None:
    rng = random.Random(seed)
    payloads = [b"default/m2", b"", b"x", bytes(range(256)) * 300, b"y" * 70_000, b"z" * 65_532,
                rng.randbytes(300_000), b"tail"]
    stream = PREAMBLE + b"".join(frame(p) for p in payloads)
    reads = [rng.choice([1, 3, 4, 5, 100, 4096, 65_536, 262_144]) for _ in range(len(stream))]
    conn, transport = _connected(first_limit=1024, preamble=PREAMBLE)
    got: list[bytes] = []
    at = 0
    # Feed in slices, taking frames as they come so the socket is never left paused.
    while at < len(stream):
        step = rng.randint(1, 200_000)
        _feed(conn, stream[at:at + step], reads)
        at += step
        got += _drain(conn)
        assert not transport.paused
    assert got == payloads
    assert not transport.aborted


def test_a_wrong_preamble_closes_the_connection() -> None:
    conn, transport = _connected(first_limit=1024, preamble=PREAMBLE)
    _feed(conn, b"GET / HTTP/1.1\r\n", [1000])
    assert transport.aborted and "not a Strongroom" in conn.refusal
    assert not conn._frames


def test_a_first_frame_over_its_limit_closes_the_connection() -> None:
    conn, transport = _connected(first_limit=1024, preamble=PREAMBLE)
    _feed(conn, PREAMBLE + (1025).to_bytes(4, "big") + b"n" * 10, [1000])
    assert transport.aborted and "over the limit of 1024" in conn.refusal


def test_a_frame_over_max_frame_closes_the_connection() -> None:
    conn, transport = _connected()
    _feed(conn, frame(b"ok") + (MAX_FRAME + 1).to_bytes(4, "big"), [1000])
    assert transport.aborted
    assert _drain(conn) == [b"ok"]


def test_a_peer_that_does_not_wait_for_answers_is_paused_and_resumed() -> None:
    conn, transport = _connected()
    _feed(conn, frame(b"a") + frame(b"b") + frame(b"c"), [1000])
    assert transport.paused
    assert _drain(conn) == [b"a", b"b", b"c"]
    assert not transport.paused


def test_the_end_of_the_connection_ends_the_wait_for_a_frame() -> None:
    conn, _ = _connected()

    async def wait_then_end() -> None:
        waiting = asyncio.ensure_future(conn.next_frame())
        await asyncio.sleep(0)
        _feed(conn, (10).to_bytes(4, "big") + b"part", [1000])
        conn.connection_lost(None)
        with pytest.raises(LinkClosed):
            await waiting

    asyncio.run(wait_then_end())
