"""The allocation report of a traced process (observability/memtrace.py): written on SIGUSR2,
naming the site that holds the memory; nothing installed when tracing is off."""

from __future__ import annotations

import asyncio
import os
import signal
import tracemalloc
from pathlib import Path

from strongroom.observability import memtrace


def _hold() -> list[bytes]:
    return [bytes(1000) + bytes([i % 256]) for i in range(20_000)]  # ~20 MiB from this line


async def _report_on_signal(tmp_path: Path) -> str:
    assert memtrace.install(tmp_path)
    try:
        held = _hold()
        os.kill(os.getpid(), signal.SIGUSR2)
        path = tmp_path / memtrace.REPORT_NAME
        for _ in range(200):
            await asyncio.sleep(0.05)
            if path.exists():
                break
        del held
        return path.read_text()
    finally:
        asyncio.get_running_loop().remove_signal_handler(signal.SIGUSR2)


def test_sigusr2_writes_the_top_sites(tmp_path: Path) -> None:
    tracemalloc.start()
    try:
        text = asyncio.run(_report_on_signal(tmp_path))
    finally:
        tracemalloc.stop()
    lines = text.splitlines()
    assert lines[0].startswith("# traced ")
    top = lines[1].split()
    assert top[-1].endswith(f"test_memtrace.py:{_hold.__code__.co_firstlineno + 1}"), lines[:3]
    assert float(top[0]) > 15.0, lines[1]  # MiB held by that line


def test_not_installed_without_tracing(tmp_path: Path) -> None:
    assert not tracemalloc.is_tracing()

    async def attempt() -> bool:
        return memtrace.install(tmp_path)

    assert asyncio.run(attempt()) is False
