"""The HTTP listener (``http-port``, off by default; ``http-bind``): probes
and metrics on the daemon's own event loop.

``GET /healthz``  200 ``ok``: the process serves.
``GET /readyz``   200 ``ready`` once recovery is done and the log can be
                  written; 503 with the reason otherwise (loading, or the
                  disk refuses the log).
``GET /metrics``  Prometheus text format (``daemon.metrics``).

A request is one line and headers; the answer closes the connection.
Anything else is 404 (path) or 405 (method).  The few lines of HTTP here
are all the listener needs; a web framework would add a dependency and a
second event loop's worth of machinery for three endpoints.
"""

from __future__ import annotations

import asyncio
import logging

from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

log = logging.getLogger(__name__)

MAX_HEAD = 8192


class HttpListener:
    def __init__(self, server) -> None:
        self.server = server
        self._listener = None

    async def start(self, bind: str, port: int) -> int:
        self._listener = await asyncio.start_server(self._serve, bind, port, reuse_address=True)
        bound = self._listener.sockets[0].getsockname()[1]
        log.info("HTTP listener on %s:%d (/healthz, /readyz, /metrics)", bind, bound)
        return bound

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            status, ctype, body = self.answer(head[:MAX_HEAD])
            if body is METRICS:
                body = await self.metrics()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ConnectionError):
            status, ctype, body = "400 Bad Request", "text/plain", b"bad request\n"
        try:
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                         f"Connection: close\r\n\r\n".encode() + body)
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    def answer(self, head: bytes) -> tuple[str, str, bytes]:
        parts = head.split(b"\r\n", 1)[0].split()
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
            return "400 Bad Request", "text/plain", b"bad request\n"
        method, target = parts[0], parts[1].split(b"?", 1)[0]
        if target not in (b"/healthz", b"/readyz", b"/metrics"):
            return "404 Not Found", "text/plain", b"not found: try /healthz, /readyz or /metrics\n"
        if method not in (b"GET", b"HEAD"):
            return "405 Method Not Allowed", "text/plain", b"only GET\n"
        server = self.server
        if target == b"/healthz":
            return "200 OK", "text/plain", b"ok\n"
        if target == b"/readyz":
            if server.loading:
                return "503 Service Unavailable", "text/plain", b"loading: recovering the data directory\n"
            if server.disk_error is not None:
                reason = server.disk_error.strerror or str(server.disk_error)
                return "503 Service Unavailable", "text/plain", f"the log cannot be written: {reason}\n".encode()
            return "200 OK", "text/plain", b"ready\n"
        return "200 OK", CONTENT_TYPE_LATEST, METRICS

    async def metrics(self) -> bytes:
        """The figures are read on the loop (they are live state); turning
        them into text, most of a scrape's time, runs in a worker thread."""
        families = list(self.server.metrics.collect())
        return await asyncio.get_running_loop().run_in_executor(None, generate_latest, _Collected(families))


METRICS = object()      # answer() leaves the body of /metrics to metrics()


class _Collected:
    """A registry that hands out metric families read beforehand."""

    def __init__(self, families: list) -> None:
        self.families = families

    def collect(self):
        return iter(self.families)
