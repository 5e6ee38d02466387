"""The gRPC side of a store migration (`migration.py` is the domain): the instances that
`strongroom store unload` and `strongroom store load` run, each until the migration ends.

Both instances listen at their own address and serve only administration requests:
`AdminService.Status` (field `migration`: run mode, partner, state, progress) and
`StoreMigrationService`; every other call gets NOT_OPERATIONAL (UNAVAILABLE, retriable, metadata
`partner` and `state`). They may be started in either order: the unload calls the load's
Handshake until it answers, the load waits for it; each prints a line every 10 s while it waits.

    unload                                  load
    Handshake(side)  ───────────────────►   compares, answers its side and problems
    (compares too; a problem: Abort ──►)    (a problem: stops)
    Transfer(chunks of raw records) ────►   writes them unchanged, database by database
    Summary(counts)  ───────────────────►   syncs, reads its store back, counts, compares
    both report whether the counts match and stop (exit status 0, else 1; 2 on a problem)
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from strongroom.api.v1 import admin_pb2 as apb
from strongroom.api.v1 import migration_pb2 as mpb
from strongroom.api.v1 import migration_pb2_grpc as mgrpc
from strongroom.channels import add_port, connecting_within, new_server, open_channel
from strongroom.errors import MigrationRefused, NotOperational
from strongroom.grpcerrors import abort_with, from_rpc_error
from strongroom.persistence import migration as mig
from strongroom.persistence.pstore_report import LOADED, UNLOADED, ReportWriter, classify
from strongroom.persistence.standby_server import AdminOnlyHandler

__all__ = ["Outcome", "run_load", "run_unload"]

log = logging.getLogger("strongroom.migration")

_WAIT_LINE_SECONDS = 10.0
_CHUNK_RECORDS = 2000
_CHUNK_BYTES = 1 << 20


@dataclass
class Outcome:
    """How an instance ended: exit status 0 (counts match), 1 (they differ) or 2 (a problem)."""

    status: int
    lines: list[str]
    records: int = 0
    bytes: int = 0
    elements: int = 0
    seconds: float = 0.0
    report: str = ""
    counts: dict[str, dict[str, int]] = field(default_factory=dict)


class Instance:
    """One migration instance: what it says of itself, its progress and how it ends."""

    def __init__(self, me: mig.Side, report: ReportWriter | None, say: Callable[[str], None]) -> None:
        self.me = me
        self.mode = mig.MigrationMode(me.run_mode)
        self.report = report
        self.say = say
        self.state = "waiting for the partner"
        self.counts = mig.Counts()
        self.ended: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self.started = time.monotonic()
        # One thread for every read and write of a store: the databases' handles stay on it.
        self.disk = ThreadPoolExecutor(max_workers=1, thread_name_prefix="migration")

    async def on_disk(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` on the instance's disk thread."""
        return await asyncio.get_running_loop().run_in_executor(self.disk, fn, *args)

    def end(self, status: int, lines: list[str]) -> None:
        if self.ended.done():
            return
        self.state = "done" if status == 0 else "failed"
        counts = {f"{db}/{fam}": {"records": c.records, "bytes": c.bytes, "elements": c.elements}
                  for (db, fam), c in self.counts.families.items()}
        self.ended.set_result(Outcome(status, lines, self.counts.records, self.counts.bytes, self.counts.elements,
                                      time.monotonic() - self.started,
                                      str(self.report.path) if self.report else "", counts))

    def status_reply(self) -> apb.ClusterStatus:
        reply = apb.ClusterStatus(cluster=self.me.cluster, member=self.me.member, role=self.mode.value)
        reply.migration.CopyFrom(mpb_status(self))
        return reply

    def refusal(self) -> NotOperational:
        return NotOperational(f"this instance of {self.me.cluster}/{self.me.member} runs in mode {self.mode.value} "
                              f"(a store migration) and serves administration requests only: {self.state}",
                              {"partner": self.me.partner, "state": self.state})


def mpb_status(inst: Instance) -> apb.MigrationStatus:
    return apb.MigrationStatus(run_mode=inst.mode.value, partner_address=inst.me.partner, state=inst.state,
                               records=inst.counts.records, bytes=inst.counts.bytes, driver=inst.me.driver)


def side_message(side: mig.Side) -> mpb.MigrationSide:
    return mpb.MigrationSide(run_mode=side.run_mode, address=side.address, partner_address=side.partner,
                             version=side.version, log_format=side.log_format, driver=side.driver,
                             store_fingerprints=list(side.fingerprints), cluster=side.cluster, member=side.member,
                             data_dir=side.data_dir)


def side_value(msg: mpb.MigrationSide) -> mig.Side:
    return mig.Side(msg.run_mode, msg.address, msg.partner_address, msg.version, msg.log_format, msg.driver,
                    tuple(msg.store_fingerprints), msg.cluster, msg.member, msg.data_dir)


def counts_message(counts: mig.Counts) -> mpb.MigrationSummary:
    return mpb.MigrationSummary(families=[
        mpb.FamilyCount(database=db, family=fam, records=c.records, bytes=c.bytes, elements=c.elements)
        for (db, fam), c in counts.families.items()])


def counts_value(msg: mpb.MigrationSummary) -> mig.Counts:
    counts = mig.Counts()
    for f in msg.families:
        counts.families[(f.database, f.family)] = mig.FamilyCount(f.records, f.bytes, f.elements)
    return counts


class _Servicer(mgrpc.StoreMigrationServiceServicer):  # type: ignore[misc]
    """StoreMigrationService: the load's whole part; an unload answers Handshake only (so that
    two unloads find each other out)."""

    def __init__(self, inst: Instance, data_dir: Path, own_problems: list[str]) -> None:
        self.inst = inst
        self.data_dir = data_dir
        self.own_problems = own_problems
        self.agreed = False
        self.transferring = False
        self.loader: mig.Loader | None = None

    async def Handshake(self, request: mpb.MigrationHandshake, context: Any) -> mpb.MigrationHandshakeReply:
        inst = self.inst
        theirs = side_value(request.side)
        problems = list(request.problems)
        problems += self.own_problems if inst.mode is mig.MigrationMode.LOAD else []
        problems += mig.handshake_problems(inst.me, theirs)
        if self.transferring:
            problems.append(f"the transfer from {theirs.address} has begun already: start both instances again "
                            "(the load with a new, empty directory)")
        if problems:
            inst.say(f"handshake with {theirs.address} failed")
            inst.end(2, problems)
        elif inst.mode is mig.MigrationMode.LOAD:
            self.agreed = True
            inst.state = "handshake held: waiting for the records"
            inst.say(f"handshake with the unload instance at {theirs.address} held: {theirs.data_dir} "
                     f"({theirs.driver}) into {inst.me.data_dir} ({inst.me.driver})")
        return mpb.MigrationHandshakeReply(side=side_message(inst.me), problems=problems)

    async def Transfer(self, request_iterator: AsyncIterator[mpb.RecordChunk], context: Any) -> mpb.TransferReply:
        inst = self.inst
        if not self.agreed or inst.ended.done():
            await abort_with(context, MigrationRefused(f"{inst.me.address} takes records only after a handshake "
                                                       "that held"))
        self.transferring = True
        inst.state = "transferring"
        loader = self.loader = mig.Loader(self.data_dir, inst.me.driver)
        whole = False
        try:
            async for chunk in request_iterator:
                await inst.on_disk(self._write, loader, chunk)
                whole = chunk.last
        except ValueError as err:
            await inst.on_disk(loader.close)
            inst.end(2, [f"the load refused the transfer: {err}"])
            await abort_with(context, MigrationRefused(str(err)))
        finally:
            if not whole:
                # The unload went away (or the stream broke) in the middle: this store is half a
                # store; the instance stops rather than wait for a summary that cannot come.
                inst.end(2, [f"the transfer from {inst.me.partner} broke off after {inst.counts.records} records: "
                             "start both instances again, the load with a new, empty directory"])
        return mpb.TransferReply(records=inst.counts.records, bytes=inst.counts.bytes)

    def _write(self, loader: mig.Loader, chunk: mpb.RecordChunk) -> None:
        if chunk.families:
            loader.open(chunk.database, list(chunk.families))
        self.inst.counts = loader.counts
        for rec in chunk.records:
            rtype, elements = classify(rec.family, rec.value)
            loader.put(rec.family, rec.key, rec.value, elements)
            if self.inst.report is not None:
                self.inst.report.add(loader.database, rec.family, rec.key, rec.value, LOADED, rtype, elements)

    async def Summary(self, request: mpb.MigrationSummary, context: Any) -> mpb.MigrationSummaryReply:
        inst = self.inst
        if self.loader is None or inst.ended.done():
            await abort_with(context, MigrationRefused(f"{inst.me.address} has loaded nothing to sum up"))
        inst.state = "comparing"
        await inst.on_disk(self.loader.finish)
        # What the new store holds, read back from it: the check is of the store, not of the wire.
        stored = await inst.on_disk(count_store, self.data_dir, inst.me.driver)
        theirs = counts_value(request)
        differences = theirs.differences(stored, "unload", "load")
        inst.counts = stored
        reply = mpb.MigrationSummaryReply(summary=counts_message(stored), match=not differences,
                                          differences=differences)
        inst.end(0 if not differences else 1, differences)
        return reply

    async def Abort(self, request: mpb.MigrationAbort, context: Any) -> mpb.MigrationAbortReply:
        if self.loader is not None:
            await self.inst.on_disk(self.loader.close)
        self.inst.end(2, list(request.problems) or ["the unload instance stopped the migration"])
        return mpb.MigrationAbortReply()


def count_store(data_dir: Path, driver: str) -> mig.Counts:
    """Counts of every record of the store in `data_dir`, read-only."""
    counts = mig.Counts()
    for database, _families, records in mig.read_databases(data_dir, driver):
        for family, key, value in records:
            counts.add(database, family, key, value, classify(family, value)[1])
    return counts


async def _serve(inst: Instance, listen: str, data_dir: Path, own_problems: list[str]) -> tuple[grpc.aio.Server, _Servicer]:
    server = new_server()
    servicer = _Servicer(inst, data_dir, own_problems)
    mgrpc.add_StoreMigrationServiceServicer_to_server(servicer, server)
    server.add_generic_rpc_handlers((AdminOnlyHandler(inst.status_reply, inst.refusal),))
    if add_port(server, listen) == 0:
        raise OSError(f"cannot listen on {listen}")
    await server.start()
    return server, servicer


async def _progress(inst: Instance, what: str, timeout: float | None) -> None:
    """A line every 10 s while `inst` waits for its partner (ending it, status 2, at `timeout`)
    and every 5 s while records go."""
    start = time.monotonic()
    while not inst.ended.done():
        waiting = inst.state.startswith("waiting")
        await asyncio.sleep(min(_WAIT_LINE_SECONDS, timeout or _WAIT_LINE_SECONDS) if waiting else 5.0)
        if inst.ended.done():
            return
        if inst.state.startswith("waiting"):
            waited = time.monotonic() - start
            if timeout is not None and waited >= timeout:
                inst.end(2, [f"{what} at {inst.me.partner} did not come within {timeout:g} s"])
                return
            inst.say(f"waiting for {what} at {inst.me.partner} ({waited:.0f} s)")
        elif inst.state in ("transferring", "comparing"):
            verb = "sent" if inst.mode is mig.MigrationMode.UNLOAD else "written"
            inst.say(f"{inst.state}: {inst.counts.records} records {verb} ({inst.counts.bytes / 1e6:.1f} MB, "
                     f"{time.monotonic() - inst.started:.0f} s)")


async def run_load(me: mig.Side, listen: str, data_dir: Path, report: ReportWriter | None,
                   say: Callable[[str], None], timeout: float | None = None) -> Outcome:
    """Run a load instance until the migration ends."""
    inst = Instance(me, report, say)
    problems = mig.load_problems(data_dir)
    for problem in problems:
        say(f"problem: {problem} (told to the unload instance at the handshake)")
    server, servicer = await _serve(inst, listen, data_dir, problems)
    say(f"load instance of {me.cluster}/{me.member} at {me.address}: {data_dir} ({me.driver}); waiting for the "
        f"unload instance at {me.partner}")
    waiter = asyncio.create_task(_progress(inst, "the unload instance", timeout))
    try:
        return await inst.ended
    finally:
        waiter.cancel()
        await server.stop(grace=2)
        if servicer.loader is not None:
            await inst.on_disk(servicer.loader.close)
        inst.disk.shutdown(wait=True)


def _chunks(data_dir: Path, driver: str, inst: Instance) -> Iterator[mpb.RecordChunk]:
    """The unload's chunks, each database's first naming its families; report lines and counts
    as records go."""
    for database, families, records in mig.read_databases(data_dir, driver):
        chunk = mpb.RecordChunk(database=database, families=families)
        size = 0
        for family, key, value in records:
            rtype, elements = classify(family, value)
            chunk.records.add(family=family, key=key, value=value)
            inst.counts.add(database, family, key, value, elements)
            if inst.report is not None:
                inst.report.add(database, family, key, value, UNLOADED, rtype, elements)
            size += len(key) + len(value)
            if len(chunk.records) >= _CHUNK_RECORDS or size >= _CHUNK_BYTES:
                yield chunk
                chunk, size = mpb.RecordChunk(database=database), 0
        yield chunk
    yield mpb.RecordChunk(last=True)


async def _read_on_disk_thread(inst: Instance, it: Iterator[mpb.RecordChunk]) -> AsyncIterator[mpb.RecordChunk]:
    done = object()
    while (chunk := await inst.on_disk(next, it, done)) is not done:
        yield chunk


async def _handshake(inst: Instance, stub: mgrpc.StoreMigrationServiceStub,
                     problems: list[str]) -> mpb.MigrationHandshakeReply | None:
    """The load's answer (None: the instance ended meanwhile: a partner's handshake, or its
    --wait ran out)."""
    while not inst.ended.done():
        try:
            return await stub.Handshake(mpb.MigrationHandshake(side=side_message(inst.me), problems=problems),  # type: ignore[no-any-return]
                                        timeout=5)
        except grpc.aio.AioRpcError as exc:
            if exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                err = from_rpc_error(exc)
                inst.end(2, [f"the partner at {inst.me.partner} answered the handshake with {exc.code().name}: "
                             f"{err.message if err else exc.details()}"])
                return None
        await asyncio.sleep(0.5)
    return None


async def run_unload(me: mig.Side, listen: str, data_dir: Path, report: ReportWriter | None,
                     say: Callable[[str], None], timeout: float | None = None) -> Outcome:
    """Run an unload instance until the migration ends. Reads `data_dir` without changing it."""
    inst = Instance(me, report, say)
    problems = mig.unload_problems(data_dir)
    lock: int | None = None
    if not problems:
        try:
            lock = mig.unload_lock(data_dir)
        except mig.StoreInUse as err:
            problems.append(str(err))
    server, _servicer = await _serve(inst, listen, data_dir, [])
    say(f"unload instance of {me.cluster}/{me.member} at {me.address}: {data_dir} ({me.driver}); handshake with "
        f"the load instance at {me.partner}")
    ticker = asyncio.create_task(_progress(inst, "the load instance", timeout))
    try:
        async with open_channel(me.partner, connecting_within(5.0)) as channel:
            stub = mgrpc.StoreMigrationServiceStub(channel)
            reply = await _handshake(inst, stub, problems)
            if reply is not None:
                # The partner's answer names every problem (ours included) in its words: both
                # instances stop with the same sentences. Our own check of the answer is the
                # same function and finds the same, unless the partner is of another version.
                if reply.problems:
                    inst.end(2, list(reply.problems))
                elif found := mig.handshake_problems(me, side_value(reply.side)):
                    await _abort(stub, found)
                    inst.end(2, found)
                else:
                    await _transfer(inst, stub, data_dir)
        return await inst.ended
    finally:
        ticker.cancel()
        await server.stop(grace=2)
        inst.disk.shutdown(wait=True)
        if lock is not None:
            os.close(lock)


async def _abort(stub: mgrpc.StoreMigrationServiceStub, problems: list[str]) -> None:
    try:
        await stub.Abort(mpb.MigrationAbort(problems=problems), timeout=5)
    except grpc.aio.AioRpcError:
        pass  # the load stops on its own when it cannot be told (its --wait)


async def _transfer(inst: Instance, stub: mgrpc.StoreMigrationServiceStub, data_dir: Path) -> None:
    me = inst.me
    inst.state = "transferring"
    inst.say(f"handshake held: sending the records of {data_dir}")
    try:
        sent = await stub.Transfer(_read_on_disk_thread(inst, _chunks(data_dir, me.driver, inst)))
        inst.say(f"sent {inst.counts.records} records ({inst.counts.bytes} bytes, {inst.counts.elements} messages); "
                 f"the load wrote {sent.records}")
        inst.state = "comparing"
        answer = await stub.Summary(counts_message(inst.counts), timeout=600)
    except grpc.aio.AioRpcError as exc:
        err = from_rpc_error(exc)
        inst.end(2, [f"the transfer to {me.partner} failed: {exc.code().name}: {err.message if err else exc.details()}"])
        return
    inst.end(0 if answer.match else 1, list(answer.differences))
