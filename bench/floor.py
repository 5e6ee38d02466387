"""The floor under Strongroom's latency on this machine: what one hop costs in Python.

    python -m bench.floor [--calls 2000]

Measures, with two processes on loopback (a grpc.aio server in a child process, the client
here), using Strongroom's own generated messages so the payload is realistic (a 1 KiB publish):

- a unary call round trip (what each `confirm` publish and, today, each Append to a follower is);
- a ping-pong over one bidirectional stream (what a streamed hop would cost instead);
- the same ping-pong over a plain asyncio TCP connection with length-prefixed frames (what a
  hop costs without gRPC: the members' replication link);
- the CPU seconds each side spends per call;
- a synced RocksDB write of one 1 KiB entry (`flush_wal(True)`), and the same without sync.

A replicated `confirm` needs at least: client -> leader hop, leader -> follower hop (the two
followers in parallel), the leader's and one follower's synced write, and the answers; so the
floor is about 2 round trips + 1 synced write, before any work of the state machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import BODY, free_port, proc_cpu_seconds
from strongroom.channels import add_port, open_channel

__all__ = ["main"]


def _server(port: int) -> None:
    import grpc

    from strongroom.api.v1 import messaging_pb2 as mpb

    async def serve() -> None:
        async def unary(req: bytes, ctx: object) -> bytes:
            mpb.PublishRequest.FromString(req)
            return mpb.PublishResponse(message_seq=1, confirmed=True).SerializeToString()

        async def stream(it: object, ctx: object) -> object:
            async for req in it:  # type: ignore[attr-defined]
                mpb.PublishRequest.FromString(req)
                yield mpb.PublishResponse(message_seq=1, confirmed=True).SerializeToString()

        handler = grpc.method_handlers_generic_handler("floor.Floor", {
            "Unary": grpc.unary_unary_rpc_method_handler(unary),
            "Stream": grpc.stream_stream_rpc_method_handler(stream),
        })
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((handler,))
        add_port(server, f"127.0.0.1:{port}", tls=None)  # the floor: gRPC without TLS
        await server.start()

        async def framed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            reply = mpb.PublishResponse(message_seq=1, confirmed=True).SerializeToString()
            reply = len(reply).to_bytes(4, "big") + reply
            try:
                while True:
                    n = int.from_bytes(await reader.readexactly(4), "big")
                    mpb.PublishRequest.FromString(await reader.readexactly(n))
                    writer.write(reply)
            except asyncio.IncompleteReadError:
                writer.close()

        tcp = await asyncio.start_server(framed, "127.0.0.1", port + 1)
        async with tcp:
            await server.wait_for_termination()

    asyncio.run(serve())


async def _client(port: int, calls: int, server_pid: int) -> dict[str, float]:

    from strongroom.api.v1 import common_pb2 as cpb
    from strongroom.api.v1 import messaging_pb2 as mpb

    req = mpb.PublishRequest(destination="floor.queue", message=cpb.Message(body=BODY, producer_id="p" * 32,
                                                                            sequence=1)).SerializeToString()
    out: dict[str, float] = {}
    async with open_channel(f"127.0.0.1:{port}", [], tls=None) as ch:
        unary = ch.unary_unary("/floor.Floor/Unary")
        for _ in range(100):
            await unary(req)
        lat = []
        s0, c0 = proc_cpu_seconds(server_pid), time.process_time()
        for _ in range(calls):
            t = time.perf_counter()
            await unary(req)
            lat.append(time.perf_counter() - t)
        out["unary_rtt_p50_ms"] = statistics.median(lat) * 1e3
        out["unary_server_cpu_ms"] = (proc_cpu_seconds(server_pid) - s0) / calls * 1e3
        out["unary_client_cpu_ms"] = (time.process_time() - c0) / calls * 1e3

        call = ch.stream_stream("/floor.Floor/Stream")()
        for _ in range(100):
            await call.write(req)
            await call.read()
        lat = []
        s0, c0 = proc_cpu_seconds(server_pid), time.process_time()
        for _ in range(calls):
            t = time.perf_counter()
            await call.write(req)
            await call.read()
            lat.append(time.perf_counter() - t)
        out["stream_rtt_p50_ms"] = statistics.median(lat) * 1e3
        out["stream_server_cpu_ms"] = (proc_cpu_seconds(server_pid) - s0) / calls * 1e3
        out["stream_client_cpu_ms"] = (time.process_time() - c0) / calls * 1e3
        await call.done_writing()

    reader, writer = await asyncio.open_connection("127.0.0.1", port + 1)
    frame = len(req).to_bytes(4, "big") + req

    async def ping() -> None:
        writer.write(frame)
        n = int.from_bytes(await reader.readexactly(4), "big")
        mpb.PublishResponse.FromString(await reader.readexactly(n))

    for _ in range(100):
        await ping()
    lat = []
    s0, c0 = proc_cpu_seconds(server_pid), time.process_time()
    for _ in range(calls):
        t = time.perf_counter()
        await ping()
        lat.append(time.perf_counter() - t)
    out["tcp_rtt_p50_ms"] = statistics.median(lat) * 1e3
    out["tcp_server_cpu_ms"] = (proc_cpu_seconds(server_pid) - s0) / calls * 1e3
    out["tcp_client_cpu_ms"] = (time.process_time() - c0) / calls * 1e3
    writer.close()
    return out


def _rocksdb(calls: int) -> dict[str, float]:
    from rocksdict import Options, Rdict, WriteBatch, WriteOptions

    d = tempfile.mkdtemp(prefix="floor-rocks-")
    try:
        db = Rdict(d, Options())
        out = {}
        for label, sync in (("rocksdb_synced_write_ms", True), ("rocksdb_unsynced_write_ms", False)):
            wo = WriteOptions()
            wo.sync = sync
            lat = []
            for i in range(max(200, calls // 4)):
                wb = WriteBatch()
                wb.put(i.to_bytes(8, "big"), BODY)
                t = time.perf_counter()
                db.write(wb, wo)
                lat.append(time.perf_counter() - t)
            out[label] = statistics.median(lat) * 1e3
        db.close()
        return out
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.floor", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.serve:
        _server(a.serve)
        return 0
    port = free_port()
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "bench.floor", "--serve", str(port)], env=env)
    try:
        time.sleep(1.5)
        res = asyncio.run(_client(port, a.calls, proc.pid))
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait()
    res.update(_rocksdb(a.calls))
    for k, v in res.items():
        print(f"{k:28} {v:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
