"""The daemon's ``Server`` run in this process, on uvloop, for what a
daemon in a subprocess cannot show: a client on another host being refused
by protected mode (no test may use an address but 127.0.0.1, so that client
is a stand-in transport reporting 10.0.0.5, handed to a real ``Connection``)
while real loopback clients are served, the socket options of a
connection that came in over TLS, and a TLS handshake that never comes
(with a timeout shortened for the test)."""

from __future__ import annotations

import asyncio
import signal
import socket
import ssl
import time

import uvloop
from harness import HOST, StandInTransport, free_port

from leaseq.commands import errors
from leaseq.daemon import config, tls
from leaseq.daemon.connection import Connection
from leaseq.daemon.resp import encode
from leaseq.daemon.server import Server
from leaseq.storage.datadir import DataDir


def serve_in_process(settings: config.Settings, scenario) -> None:
    """Listen, recover ``settings.dir``, run ``await scenario(server)``,
    then shut down as SIGTERM would; the signal handlers go back as they were."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    async def main() -> None:
        server = Server(settings)
        await server.listen()
        server.attach(DataDir.open(settings.dir, int(time.time() * 1000)))
        try:
            await asyncio.wait_for(scenario(server), 30)
        finally:
            server.request_shutdown("the test is over")
            await asyncio.wait_for(server.wait_stopped(), 30)

    try:
        uvloop.run(main())
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


async def command(reader, writer, line: bytes) -> bytes:
    writer.write(line + b"\r\n")
    return await asyncio.wait_for(reader.readline(), 10)


def test_a_client_on_another_host_is_denied_while_loopback_clients_are_served(tmp_path):
    seen = {}

    async def scenario(server: Server) -> None:
        r1, w1 = await asyncio.open_connection(HOST, server.listeners.port)
        r2, w2 = await asyncio.open_connection(HOST, server.listeners.port)
        assert await command(r1, w1, b"PING") == b"+PONG\r\n"
        w1.write(b"QCLAIM jobs w BLOCK 10000\r\n")         # parked while the stranger arrives
        while server.blocking.count() == 0:                  # bounded by the scenario's 30 s
            await asyncio.sleep(0.005)
        stranger = StandInTransport(("10.0.0.5", 40000))
        Connection(server).connection_made(stranger)
        seen["stranger"] = stranger
        assert await command(r2, w2, b"QPUSH jobs hello") == b":1\r\n"
        w1.write(b"PING\r\n")                               # answered after the claim's reply
        seen["claimed"] = await asyncio.wait_for(r1.readuntil(b"+PONG\r\n"), 10)
        seen["stats"] = (len(server.clients), server.stats.rejected)
        for w in (w1, w2):
            w.close()

    # the rule reads the client's address, not bind: the default bind shows it without opening more
    serve_in_process(config.Settings(port=free_port(), dir=str(tmp_path / "data")), scenario)
    assert seen["stranger"].written == encode(errors.DENIED, False) and seen["stranger"].closed
    assert b"hello" in seen["claimed"]
    assert seen["stats"] == (2, 1)


def test_a_tls_connection_gets_tcp_nodelay_like_a_plain_one(tmp_path, pki):
    seen = {}

    async def scenario(server: Server) -> None:
        context = ssl.create_default_context(cafile=pki.ca)
        context.load_cert_chain(pki.client_cert, pki.client_key)
        reader, writer = await asyncio.open_connection(HOST, server.listeners.tls_port, ssl=context)
        plain_reader, plain_writer = await asyncio.open_connection(HOST, server.listeners.port)
        assert await command(reader, writer, b"PING") == b"+PONG\r\n"
        assert await command(plain_reader, plain_writer, b"PING") == b"+PONG\r\n"
        for conn in server.clients.values():
            sock = conn.transport.get_extra_info("socket")
            seen[conn.laddr.rsplit(":", 1)[1]] = (sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY), conn.fd)
        for w in (writer, plain_writer):
            w.close()

    settings = config.Settings(port=free_port(), tls_port=free_port(), tls_cert_file=pki.server_cert,
                               tls_key_file=pki.server_key, tls_ca_cert_file=pki.ca, dir=str(tmp_path / "data"))
    serve_in_process(settings, scenario)
    nodelay = {port: (bool(flag), fd > 0) for port, (flag, fd) in seen.items()}
    assert nodelay == {str(settings.tls_port): (True, True), str(settings.port): (True, True)}


def test_a_client_that_never_handshakes_is_closed_at_the_timeout_while_others_are_served(tmp_path, pki,
                                                                                         monkeypatch):
    monkeypatch.setattr(tls, "HANDSHAKE_TIMEOUT", 0.3)
    seen = {}

    async def scenario(server: Server) -> None:
        context = ssl.create_default_context(cafile=pki.ca)
        context.load_cert_chain(pki.client_cert, pki.client_key)
        silent_reader, silent_writer = await asyncio.open_connection(HOST, server.listeners.tls_port)   # sends nothing
        reader, writer = await asyncio.open_connection(HOST, server.listeners.tls_port, ssl=context)
        assert await command(reader, writer, b"PING") == b"+PONG\r\n"
        seen["silent got"] = await asyncio.wait_for(silent_reader.read(100), 10)           # b"": closed
        assert await command(reader, writer, b"QPUSH jobs after") == b":1\r\n"
        seen["failures"] = server.stats.tls_handshake_failures
        for w in (writer, silent_writer):
            w.close()

    settings = config.Settings(port=free_port(), tls_port=free_port(), tls_cert_file=pki.server_cert,
                               tls_key_file=pki.server_key, tls_ca_cert_file=pki.ca, dir=str(tmp_path / "data"))
    serve_in_process(settings, scenario)
    assert seen == {"silent got": b"", "failures": 1}
