"""A TCP proxy on loopback that a test can cut and restore (a network partition of one link)."""

from __future__ import annotations

import asyncio
import threading

from strongroom.local.etcdproc import free_port


class LinkProxy:
    """Forwards 127.0.0.1:<port> to a target; `cut()` drops every connection and refuses new ones."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self._cut = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", self.port))
        self._ready.set()
        self._loop.run_forever()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while not self._cut:
                data = await reader.read(65536)
                if not data or self._cut:
                    break
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._cut:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        self._writers.discard(writer)
        self._writers.discard(up_writer)

    def cut(self) -> None:
        """Partition: drop open connections, refuse new ones."""
        def do() -> None:
            self._cut = True
            for w in list(self._writers):
                w.transport.abort()
            self._writers.clear()
        self._loop.call_soon_threadsafe(do)

    def restore(self) -> None:
        """Heal the partition."""
        self._loop.call_soon_threadsafe(lambda: setattr(self, "_cut", False))

    def close(self) -> None:
        def do() -> None:
            self._server.close()
            for w in list(self._writers):
                w.transport.abort()
            self._loop.stop()
        self._loop.call_soon_threadsafe(do)
        self._thread.join(5)
