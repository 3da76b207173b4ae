"""Who is served: a new connection is registered or refused (shutting
down, maxclients, protected mode: daemon/protected.py), failed TLS
handshakes are counted, the start-up warns when other hosts can reach a
port without a password, and the idle-client reaper closes connections
idle beyond ``timeout``.
"""

from __future__ import annotations

import logging
import socket
import time

from leaseq.commands import errors
from leaseq.commands.replies import Error

from .protected import binds_beyond_loopback, protected_mode_refuses
from .resp import encode

log = logging.getLogger(__name__)


class Admission:
    """The door of ``server.clients``: ``Connection.connection_made`` calls
    ``register``; the TLS listener calls ``tls_handshake_failed``."""

    def __init__(self, server) -> None:
        self.server = server
        self.next_client_id = 1

    def register(self, conn) -> None:
        """A new connection (on the TLS port: once its handshake is done) is
        served, or answered one error and closed without touching anyone else."""
        stats = self.server.stats
        stats.connections += 1
        refusal = self._refusal(conn)
        if refusal is not None:
            stats.rejected += 1
            conn.transport.write(encode(refusal, False))
            conn.transport.close()
            conn.closed = True
            return
        conn.id = self.next_client_id
        self.next_client_id += 1
        self.server.clients[conn.id] = conn
        keep_alive(conn.transport, self.server.settings.tcp_keepalive)

    def _refusal(self, conn) -> Error | None:
        """Why a new connection is not served, in Redis's order: shutting
        down, maxclients, then protected mode (daemon/protected.py)."""
        server = self.server
        if server.stopping:
            return errors.SHUTTING_DOWN
        if len(server.clients) >= server.settings.maxclients:
            return errors.MAX_CLIENTS
        peer = conn.transport.get_extra_info("peername")
        host = peer[0] if isinstance(peer, tuple) else None
        if protected_mode_refuses(server.settings.protected_mode, self.default_user_has_no_password(), host):
            return errors.DENIED
        return None

    def default_user_has_no_password(self) -> bool:
        """What protected mode asks (Redis: the default user is ``nopass``;
        requirepass or a ``user default`` line with a password ends that)."""
        return self.server.acl.default.nopass

    def tls_handshake_failed(self, addr: str, reason: str) -> None:
        """A client's TLS handshake failed (plain text on the TLS port, no or
        a wrong certificate): one line and a count, never a traceback; the
        socket is closed already."""
        self.server.stats.tls_handshake_failures += 1
        log.info("TLS handshake with %s failed: %s", addr, reason)

    def warn_if_reachable_without_password(self, binds: list[str]) -> None:
        """Other hosts can reach a port (listening on ``binds``) and the
        default user has no password: say what protected mode does about it
        (or that it is off)."""
        reachable = sorted({b for b in binds if binds_beyond_loopback(b)})
        if not reachable or not self.default_user_has_no_password():
            return
        if self.server.settings.protected_mode:
            log.warning("listening on %s without requirepass: protected mode answers clients on other hosts "
                        "-DENIED. Set requirepass to serve them.", " and ".join(reachable))
        else:
            log.warning("listening on %s without requirepass and with protected-mode no: any host that reaches "
                        "this port can use every queue. Set requirepass or bind 127.0.0.1.", " and ".join(reachable))


def keep_alive(transport, seconds: int) -> None:
    """``tcp-keepalive``: after ``seconds`` of silence the kernel probes the
    peer every third of that, and gives the connection up after three
    unanswered probes (as Redis sets it), so a peer whose machine died
    without closing is noticed.  A socket that takes no such option (a
    Unix socket) is left as it is."""
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or not seconds or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if hasattr(socket, "TCP_KEEPIDLE"):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, seconds)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, max(1, seconds // 3))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
    except OSError as e:
        log.debug("cannot set TCP keepalive: %s", e)


class IdleReaper:
    """``timeout``: every 0.1 s (``scan``) close the connections idle longer
    than the setting, read each time; a blocked claim is not idle.  The
    same tick looks after the replication links (``Liveness``,
    daemon/liveness.py)."""

    PERIOD = 0.1

    def __init__(self, server) -> None:
        self.server = server

    def scan(self) -> None:
        now = time.monotonic()
        self.server.replication.liveness.scan(now)    # repl-timeout, repl-ping-replica-period
        timeout = self.server.settings.timeout
        if not timeout:
            return
        for c in list(self.server.clients.values()):
            if c.waiting is None and now - c.last_active > timeout:
                log.info("closing idle client id=%d addr=%s", c.id, c.addr)
                c.kill()
