"""A TCP proxy on loopback for fault tests: a service reached through it becomes unreachable when
the proxy stops (its connections are cut, new ones refused) and reachable again when it restarts on
the same port. Real sockets and real servers on both sides; nothing is patched."""

from __future__ import annotations

import asyncio
import contextlib

from tests.conftest import free_port


class TcpProxy:
    def __init__(self, target: str) -> None:
        """`target` is host:port, or the path of a unix socket (the embedded Postgres listens on one)."""
        self.target = target
        self.port = free_port()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, reuse_address=True)

    async def stop(self) -> None:
        """Refuse new connections and cut every open one."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if self.target.startswith("/"):
                up_reader, up_writer = await asyncio.open_unix_connection(self.target)
            else:
                host, _, port = self.target.rpartition(":")
                up_reader, up_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.transport.abort()
