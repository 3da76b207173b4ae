"""The daemon's ports: the plain RESP port, the TLS port (``tls-port``,
daemon/tls.py) and the HTTP port (``http-port``, daemon/http.py); opened by
``Server.listen``, closed at shutdown or when recovery fails.  Each
accepted client becomes a ``Connection`` (on the TLS port once its
handshake is done), which asks ``Admission.register`` to be served.
"""

from __future__ import annotations

from . import tls
from .connection import Connection
from .http import HttpListener


class Listeners:
    def __init__(self, server) -> None:
        self.server = server
        self.port = server.settings.port          # the bound port once ``start`` ran (port 0 picks one)
        self.tls_port = 0                         # 0: no TLS listener
        self.http_port = 0                        # 0: no HTTP listener
        self.http: HttpListener | None = None
        self._plain = None
        self._tls: tls.TlsListener | None = None

    async def start(self, loop) -> None:
        """Open every port the settings ask for (the TLS files were checked
        by ``config.load``; the context is built again here)."""
        server = self.server
        s = server.settings
        context = tls.server_context(s) if s.tls_port else None
        self._plain = await loop.create_server(lambda: Connection(server), s.bind, s.port,
                                               reuse_address=True, backlog=511)
        self.port = self._plain.sockets[0].getsockname()[1]
        if context is not None:
            # each accepted socket handshakes first, then becomes a Connection like any other
            self._tls = tls.TlsListener(server, context, lambda: Connection(server))
            self.tls_port = self._tls.start(self.tls_bind, s.tls_port)
        if s.http_port:
            self.http = HttpListener(server)
            self.http_port = await self.http.start(s.http_bind, s.http_port)

    def close(self) -> None:
        """Close every listener and drop the TLS handshakes still running."""
        self._plain.close()
        if self._tls is not None:
            self._tls.close()
        if self.http is not None:
            self.http.close()

    @property
    def tls_bind(self) -> str:
        return self.server.settings.tls_bind or self.server.settings.bind

    def binds(self) -> list[str]:
        """The addresses the RESP ports listen on."""
        return [self.server.settings.bind] + ([self.tls_bind] if self.tls_port else [])

    def addresses(self) -> str:
        """Where clients reach the daemon, for the log."""
        where = f"{self.server.settings.bind}:{self.port}"
        return f"{where} and TLS on {self.tls_bind}:{self.tls_port}" if self.tls_port else where
