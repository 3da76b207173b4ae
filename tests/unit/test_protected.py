"""Protected mode (docs/operations.md, "Security"): the decision is one pure
function, tested here with client addresses that tests bound to 127.0.0.1
can never produce for real; then ``Admission.register`` (daemon/admission.py) acting on it, driven
with stand-in transports that report such an address."""

from __future__ import annotations

import pytest
from harness import StandInTransport

from leaseq.commands import errors
from leaseq.daemon import config
from leaseq.daemon.connection import Connection
from leaseq.daemon.protected import binds_beyond_loopback, is_loopback, protected_mode_refuses
from leaseq.daemon.resp import encode
from leaseq.daemon.server import Server


@pytest.mark.parametrize("peer, refused", [
    ("10.0.0.5", True),
    ("::ffff:10.0.0.5", True),          # an IPv4 client on an IPv6 socket
    ("2001:db8::7", True),
    ("fe80::1%eth0", True),             # link-local with a zone: another host all the same
    ("not an address", True),           # what cannot be read is not trusted
    ("127.0.0.1", False),
    ("127.5.5.5", False),               # all of 127.0.0.0/8 is loopback
    ("::1", False),
    ("::ffff:127.0.0.1", False),
    (None, False),                      # no IP address (a unix socket, in Redis): local
])
def test_without_a_password_only_loopback_clients_are_served(peer, refused):
    assert protected_mode_refuses(True, True, peer) is refused


@pytest.mark.parametrize("protected_mode, no_password", [(False, True), (True, False), (False, False)])
def test_a_password_or_protected_mode_no_serves_every_host(protected_mode, no_password):
    assert not protected_mode_refuses(protected_mode, no_password, "10.0.0.5")


@pytest.mark.parametrize("bind, beyond", [
    ("127.0.0.1", False), ("127.0.0.2", False), ("::1", False), ("localhost", False), ("LOCALHOST", False),
    ("0.0.0.0", True), ("::", True), ("", True), ("10.1.2.3", True), ("pod.example", True),
])
def test_which_binds_reach_other_hosts(bind, beyond):
    assert binds_beyond_loopback(bind) is beyond


def test_is_loopback_reads_addresses_as_the_socket_reports_them():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback(None)
    assert not is_loopback("192.168.1.20") and not is_loopback("")


# -- the server acting on it --------------------------------------------------------------------

def connect(server: Server, peer) -> tuple[Connection, StandInTransport]:
    conn = Connection(server)
    transport = StandInTransport(peer)
    conn.connection_made(transport)
    return conn, transport


def test_a_client_on_another_host_gets_denied_and_the_loopback_client_keeps_its_place(tmp_path):
    server = Server(config.Settings(bind="0.0.0.0", dir=str(tmp_path)))
    local, local_transport = connect(server, ("127.0.0.1", 40001))
    remote, remote_transport = connect(server, ("10.0.0.5", 40002))
    mapped, mapped_transport = connect(server, ("::ffff:10.0.0.6", 40003, 0, 0))
    for transport in (remote_transport, mapped_transport):
        assert transport.written == encode(errors.DENIED, False) and transport.closed
    assert remote_transport.written.startswith(b"-DENIED leaseq is running in protected mode")
    assert list(server.clients.values()) == [local]
    assert (local_transport.written, local_transport.closed) == (b"", False)
    assert (server.stats.connections, server.stats.rejected) == (3, 2)


def test_a_password_set_at_run_time_lets_other_hosts_in(tmp_path):
    server = Server(config.Settings(bind="0.0.0.0", dir=str(tmp_path)))
    assert server.admission.default_user_has_no_password()
    server.configuration.set([("requirepass", "s3cret")])
    assert not server.admission.default_user_has_no_password()
    remote, transport = connect(server, ("10.0.0.5", 40002))
    assert transport.written == b"" and remote.id in server.clients
    server.configuration.set([("requirepass", ""), ("protected-mode", "no")])
    remote, transport = connect(server, ("10.0.0.7", 40004))
    assert transport.written == b"" and remote.id in server.clients
