"""The TLS listener (``tls-port``): Redis's settings, Python's ssl module,
the daemon's own event loop.

``server_context(settings)`` builds the ``ssl.SSLContext`` from the
``tls-*`` settings, or raises ``ConfigError`` naming the setting and the
file: ``config.load`` calls it, so a certificate that cannot be used stops
the start before anything opens (exit 1, like any bad setting).

``TlsListener`` accepts sockets and runs each handshake with
``loop.connect_accepted_socket(..., ssl=context)`` instead of passing
``ssl=`` to ``create_server``: a handshake that fails (plain text on the TLS
port, a client without a certificate or with one of another CA, a TLS
version not allowed, a client that never finishes) then ends in our hands,
where it is counted (``INFO stats`` ``tls_handshake_failures``) and logged
as one line.  With ``ssl=`` the loop drops such a connection silently.
(``loop.start_tls`` on an accepted plain connection is no way out: uvloop
starts reading before it could take over, and the ClientHello is lost.)
Only after the handshake does the socket become a ``Connection``, with the
TLS transport, so everything after it (registration, protected mode,
commands) is the plain path.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl

from .config import ConfigError

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT = 10.0      # seconds a client may take to finish its handshake

VERSIONS = {"tlsv1.2": ssl.TLSVersion.TLSv1_2, "tlsv1.3": ssl.TLSVersion.TLSv1_3}

VERIFY = {"yes": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL, "no": ssl.CERT_NONE}


# -- the context --------------------------------------------------------------------------------

def server_context(settings) -> ssl.SSLContext:
    """The TLS listener's context; ConfigError names the setting (and file)
    that keeps it from being built."""
    s = settings
    _require_files(s)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version, context.maximum_version = protocol_range(s.tls_protocols)
    _load_certificate(context, s.tls_cert_file, s.tls_key_file)
    if s.tls_ca_cert_file:
        _load_ca(context, s.tls_ca_cert_file)
    context.verify_mode = VERIFY[s.tls_auth_clients]
    return context


def _require_files(s) -> None:
    """tls-port needs a certificate and its key; checking clients needs the
    CA that signs them (Redis refuses the same settings)."""
    if s.tls_port == s.port:
        raise ConfigError(f"'tls-port' {s.tls_port} is also 'port': give the TLS listener a port of its own")
    for name, path in (("tls-cert-file", s.tls_cert_file), ("tls-key-file", s.tls_key_file)):
        if not path:
            raise ConfigError(f"'tls-port' is {s.tls_port} but '{name}' is not set")
    if s.tls_auth_clients != "no" and not s.tls_ca_cert_file:
        raise ConfigError(f"'tls-auth-clients' is {s.tls_auth_clients} but 'tls-ca-cert-file' is not set: "
                          f"set it to the CA that signs client certificates, or set tls-auth-clients no")


def protocol_range(text: str) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    """``tls-protocols`` ("TLSv1.2 TLSv1.3", either or both) as the lowest
    and highest version allowed."""
    names = text.lower().split()
    unknown = [n for n in names if n not in VERSIONS]
    if not names or unknown:
        raise ConfigError(f"'tls-protocols' must name TLSv1.2, TLSv1.3 or both, not '{text}'")
    versions = sorted(VERSIONS[n] for n in names)
    return versions[0], versions[-1]


def _load_certificate(context: ssl.SSLContext, cert: str, key: str) -> None:
    _pem("tls-cert-file", cert, b"-----BEGIN CERTIFICATE-----", "certificate")
    _pem("tls-key-file", key, b"PRIVATE KEY-----", "private key")

    def encrypted() -> str:
        # without this callback OpenSSL would prompt on the terminal, and a daemon would hang
        raise ConfigError(f"'tls-key-file' {key} is encrypted: leaseq reads only unencrypted keys")

    try:
        context.load_cert_chain(cert, key, password=encrypted)
    except ssl.SSLError as e:
        if e.reason == "KEY_VALUES_MISMATCH":
            raise ConfigError(f"'tls-key-file' {key} is not the private key of 'tls-cert-file' {cert}") from None
        raise ConfigError(f"'tls-cert-file' {cert} and 'tls-key-file' {key} do not load as a PEM certificate "
                          f"and its key: {_reason(e)}") from None


def _load_ca(context: ssl.SSLContext, path: str) -> None:
    _pem("tls-ca-cert-file", path, b"-----BEGIN CERTIFICATE-----", "certificate")
    try:
        context.load_verify_locations(cafile=path)
    except ssl.SSLError as e:
        raise ConfigError(f"'tls-ca-cert-file' {path} does not load as PEM certificates: {_reason(e)}") from None


def _pem(name: str, path: str, marker: bytes, what: str) -> None:
    """The file of setting ``name`` reads and holds a PEM ``what``, so the
    error names the right file (OpenSSL's own says only "PEM lib")."""
    try:
        with open(path, "rb") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError(f"'{name}' {path} cannot be read: {e.strerror}") from None
    if marker not in text:
        raise ConfigError(f"'{name}' {path} holds no PEM {what}")


def _reason(e: BaseException) -> str:
    """An error in a few words: OpenSSL's reason ("wrong version number",
    "certificate verify failed: unable to get local issuer certificate")
    when it gives one."""
    reason = getattr(e, "reason", None)
    if not reason:
        return str(e) or type(e).__name__
    words = reason.lower().replace("_", " ")
    verify = getattr(e, "verify_message", None)
    return f"{words}: {verify}" if verify else words


# -- the listener -------------------------------------------------------------------------------

class TlsListener:
    """The TLS port.  It accepts sockets itself and hands each one to
    ``loop.connect_accepted_socket`` with the context: the handshake runs
    on the loop, the ``Connection`` is made once it is done (its
    ``connection_made`` gets the TLS transport), and a handshake that fails
    ends here, closing only that socket."""

    def __init__(self, server, context: ssl.SSLContext, new_connection) -> None:
        self.server = server
        self.context = context
        self.new_connection = new_connection
        self.sock: socket.socket | None = None
        self.handshakes: set = set()          # tasks, each one socket's handshake
        self._accepting = None

    def start(self, bind: str, port: int) -> int:
        """Listen on ``bind``:``port``; the port bound."""
        self.sock = listening_socket(bind, port)
        self._accepting = self.server.loop.create_task(self._accept())
        return self.sock.getsockname()[1]

    def close(self) -> None:
        """Stop accepting and drop the handshakes still running (their
        sockets close); connections already made stay the server's."""
        if self._accepting is not None:
            self._accepting.cancel()
        for task in list(self.handshakes):
            task.cancel()
        if self.sock is not None:
            self.sock.close()

    async def _accept(self) -> None:
        loop = self.server.loop
        while True:
            try:
                sock, peer = await loop.sock_accept(self.sock)
            except OSError as e:       # out of file descriptors, say: wait instead of spinning
                log.warning("the TLS port cannot accept a connection: %s; trying again in 0.1 s", e.strerror or e)
                await asyncio.sleep(0.1)
                continue
            task = loop.create_task(self._handshake(sock, peer))
            self.handshakes.add(task)
            task.add_done_callback(self.handshakes.discard)

    async def _handshake(self, sock: socket.socket, peer) -> None:
        try:
            await self.server.loop.connect_accepted_socket(self.new_connection, sock, ssl=self.context,
                                                           ssl_handshake_timeout=HANDSHAKE_TIMEOUT)
        except ConnectionResetError:
            # closed before the handshake ended: a TCP probe, a client giving up; not a failure
            log.debug("TLS client %s closed the connection during the handshake", _addr(peer))
        except Exception as e:         # the loop has closed the socket
            self.server.admission.tls_handshake_failed(_addr(peer), _reason(e))


def listening_socket(bind: str, port: int) -> socket.socket:
    """A non-blocking listening socket on the first address ``bind``
    resolves to (empty: the first wildcard address, 0.0.0.0 on most hosts)."""
    family, _type, _proto, _name, address = socket.getaddrinfo(
        bind or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    sock = socket.create_server(address, family=family, backlog=511)      # SO_REUSEADDR, as the plain port
    sock.setblocking(False)
    return sock


def _addr(peer) -> str:
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "?"
