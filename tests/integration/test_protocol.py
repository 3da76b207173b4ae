"""Wire behaviour and connection/server commands against the real daemon
(docs/semantics.md §2, §3.6, §6 and §7's NOAUTH rule; §2.4 for what clients
send when they connect).

Tests whose reply *shape* matters (nulls, maps, arrays) run with four
redis-py clients: RESP2 and RESP3, each with hiredis and with redis-py's
pure-Python parsers, which are strict about RESP2 vs RESP3 nulls.  Exact
bytes are checked on a raw socket.
"""

from __future__ import annotations

import os

import random
import socket
import time

import hiredis
import pytest
import redis
from redis._parsers import _RESP2Parser, _RESP3Parser
from redis.backoff import NoBackoff
from redis.retry import Retry

from harness import HOST, CheckedThread, Daemon, as_map, error_text, no_retry_client, unique, wait_for

# -- helpers -------------------------------------------------------------------------------

CLIENT_MODES = {
    # name: (protocol, forced parser class or None for the default (hiredis), expected parser name)
    "resp2-hiredis": (2, None, "_HiredisParser"),
    "resp3-hiredis": (3, None, "_HiredisParser"),
    "resp2-python": (2, _RESP2Parser, "_RESP2Parser"),
    "resp3-python": (3, _RESP3Parser, "_RESP3Parser"),
}


def make_client(port: int, mode: str, **kw) -> redis.Redis:
    proto, parser, _ = CLIENT_MODES[mode]
    kw.setdefault("socket_timeout", 10)
    kw.setdefault("retry", Retry(NoBackoff(), 0))   # a desync must fail, not be re-sent
    if parser is not None:
        kw["parser_class"] = parser
    pool = redis.ConnectionPool(host=HOST, port=port, protocol=proto, **kw)
    return redis.Redis(connection_pool=pool)


@pytest.fixture
def fresh(own):
    """A daemon of the test's own."""
    return own()


@pytest.fixture
def fresh_r(fresh):
    c = fresh.client(protocol=2)
    yield c
    c.close()



@pytest.fixture(params=list(CLIENT_MODES))
def client(request, daemon):
    """redis-py in one of the four protocol x parser combinations."""
    c = make_client(daemon.port, request.param)
    conn = c.connection_pool.get_connection()
    try:
        assert type(conn._parser).__name__ == CLIENT_MODES[request.param][2]
    finally:
        c.connection_pool.release(conn)
    c.mode = request.param
    c.proto = CLIENT_MODES[request.param][0]
    yield c
    c.close()
    c.connection_pool.disconnect()


def call(c: redis.Redis, *args):
    """Send one command and return the reply exactly as the parser produced it
    (no redis-py response callbacks); error replies raise ResponseError."""
    pool = c.connection_pool
    conn = pool.get_connection()
    try:
        conn.send_command(*args)
        return conn.read_response()
    finally:
        pool.release(conn)


def assert_map_shape(c, reply) -> dict:
    """docs/semantics.md §2.1: maps are RESP3 maps, and flat field/value arrays in RESP2."""
    if c.proto == 3:
        assert isinstance(reply, dict), reply
    else:
        assert isinstance(reply, list), reply
    return as_map(reply)


class Raw:
    """A plain TCP socket to the daemon for exact bytes; every read has a deadline."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=5)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.eof = False

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _recv(self, deadline: float) -> bool:
        left = deadline - time.monotonic()
        if left <= 0 or self.eof:
            return False
        self.sock.settimeout(left)
        try:
            chunk = self.sock.recv(65536)
        except socket.timeout:
            return False
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.eof = True
            return False
        self.buf += chunk
        return True

    def read_until(self, marker: bytes, timeout: float = 5.0) -> bytes:
        """Everything up to and including ``marker``; fails if it does not come in time."""
        deadline = time.monotonic() + timeout
        while marker not in self.buf:
            if not self._recv(deadline):
                raise AssertionError(f"did not receive {marker!r} within {timeout} s; got {self.buf!r}"
                                     f"{' (connection closed)' if self.eof else ''}")
        i = self.buf.index(marker) + len(marker)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def read_exactly(self, n: int, timeout: float = 5.0) -> bytes:
        deadline = time.monotonic() + timeout
        while len(self.buf) < n:
            if not self._recv(deadline):
                raise AssertionError(f"wanted {n} bytes within {timeout} s, got {len(self.buf)}: {self.buf[:200]!r}")
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_until_closed(self, timeout: float = 5.0) -> bytes:
        """All bytes until the daemon closes the connection; fails if it stays open."""
        deadline = time.monotonic() + timeout
        while not self.eof:
            if not self._recv(deadline) and not self.eof:
                raise AssertionError(f"connection still open after {timeout} s; got {self.buf!r}")
        out, self.buf = self.buf, b""
        return out

    def request(self, data: bytes, marker: bytes = b"\r\n", timeout: float = 5.0) -> bytes:
        self.send(data)
        return self.read_until(marker, timeout)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def raw(daemon):
    conns = []

    def connect() -> Raw:
        c = Raw(daemon.port)
        conns.append(c)
        return c

    yield connect
    for c in conns:
        c.close()


END = hiredis.pack_command(("ECHO", "--end--"))
END_REPLY = b"$7\r\n--end--\r\n"


def replies_before_end(conn: Raw, data: bytes, timeout: float = 5.0) -> bytes:
    """Send ``data`` followed by an ECHO sentinel; return the replies to ``data``
    (so 'no reply' can be asserted without waiting for a timeout)."""
    conn.send(data + END)
    got = conn.read_until(END_REPLY, timeout)
    return got[:-len(END_REPLY)]


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """A daemon with ``requirepass secret`` (docs/semantics.md §7), shared by this module's auth tests."""
    d = Daemon(tmp_path_factory.mktemp("secured") / "data", env={"LEASEQ_REQUIREPASS": "secret"})
    d.start()
    yield d
    d.kill()


# -- PING / ECHO ----------------------------------------------------------------------------

def test_ping_without_message_answers_pong(client):
    assert call(client, "PING") in (b"PONG", "PONG")
    assert client.ping() is True


def test_ping_with_message_echoes_it_as_bulk(raw):
    c = raw()
    assert c.request(b"PING\r\n") == b"+PONG\r\n"
    assert c.request(hiredis.pack_command(("PING", "hello there")), b"there\r\n") == b"$11\r\nhello there\r\n"


def test_ping_with_two_arguments_is_an_arity_error(r):
    assert error_text(r, "PING", "a", "b") == "wrong number of arguments for 'ping' command"


def test_echo_is_binary_safe_for_every_byte_value(client):
    payload = bytes(range(256)) + b"\r\n\x00$-1\r\n*-1\r\n_\r\n"
    assert call(client, "ECHO", payload) == payload
    assert call(client, "ECHO", b"") == b""


def test_echo_binary_on_raw_socket_keeps_exact_bytes(raw):
    c = raw()
    payload = bytes(range(256))
    c.send(hiredis.pack_command((b"ECHO", payload)))
    want = b"$256\r\n" + payload + b"\r\n"
    assert c.read_exactly(len(want)) == want


def test_command_names_and_option_keywords_are_case_insensitive(r, q):
    assert r.execute_command("qPuSh", q, "x", "priority", "7") == 1
    [job] = r.execute_command("qclaim", q, "w", "count", "1", "Lease", "1000")
    assert as_map(job)[b"priority"] == 7


# -- HELLO ----------------------------------------------------------------------------------

HELLO_KEYS = {b"server", b"version", b"proto", b"id", b"mode", b"role", b"modules"}


def test_hello_reports_the_connections_protocol_with_a_map(client):
    """redis-py RESP3 connects only through HELLO 3 (a map with proto == 3)."""
    hello = assert_map_shape(client, call(client, "HELLO"))
    assert set(hello) == HELLO_KEYS
    assert hello[b"proto"] == client.proto
    assert hello[b"server"] == b"leaseq"
    assert isinstance(hello[b"version"], bytes) and hello[b"version"]
    assert hello[b"id"] == call(client, "CLIENT", "ID")
    assert hello[b"mode"] == b"standalone"
    assert hello[b"role"] == b"master"
    assert hello[b"modules"] == []


def test_hello_2_replies_flat_array_of_14(raw):
    c = raw()
    got = replies_before_end(c, b"HELLO 2\r\n")
    assert got.startswith(b"*14\r\n$6\r\nserver\r\n$6\r\nleaseq\r\n$7\r\nversion\r\n")
    assert b"$5\r\nproto\r\n:2\r\n" in got
    assert got.endswith(b"$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n")


def test_hello_3_replies_map_of_7_and_switches_mid_pipeline(raw):
    """HELLO can arrive pipelined with the commands after it: RESP2 null
    before it, RESP3 map and null after it (clients.md gotcha 1)."""
    c = raw()
    got = replies_before_end(c, b"CLIENT GETNAME\r\nHELLO 3\r\nCLIENT GETNAME\r\n")
    assert got.startswith(b"$-1\r\n%7\r\n$6\r\nserver\r\n")
    assert b"$5\r\nproto\r\n:3\r\n" in got
    assert got.endswith(b"$7\r\nmodules\r\n*0\r\n_\r\n")


def test_hello_4_is_noproto(raw):
    c = raw()
    assert replies_before_end(c, b"HELLO 4\r\n") == b"-NOPROTO unsupported protocol version\r\n"
    assert c.request(b"CLIENT GETNAME\r\n") == b"$-1\r\n"   # still RESP2


def test_hello_non_integer_version_is_an_error(r):
    assert "Protocol version is not an integer" in error_text(r, "HELLO", "abc")


def test_hello_3_auth_and_setname_in_one_command(r):
    hello = as_map(r.execute_command("HELLO", "3", "AUTH", "default", "anything", "SETNAME", "worker-1"))
    assert hello[b"proto"] == 3
    assert r.execute_command("CLIENT", "GETNAME") == b"worker-1"


def test_hello_with_unknown_option_is_an_error(r):
    assert "Syntax error in HELLO option" in error_text(r, "HELLO", "3", "BOGUS")


# -- reply shapes in all four client combinations -------------------------------------------------

def test_null_replies_parse_in_every_client_combination(client, q):
    """Nulls are $-1 in RESP2 and _ in RESP3 (the pure-Python RESP3 parser hangs on $-1)."""
    assert call(client, "CLIENT", "GETNAME") is None
    client.execute_command("QCREATE", q)
    assert client.execute_command("QGET", q, "12345") is None
    assert client.execute_command("QEXTEND", q, "1.1.1", "2.2.2") == [None, None]
    info = assert_map_shape(client, client.execute_command("QINFO", q))
    assert info[b"deadletter"] is None
    # the connection is still in step after all the nulls
    assert call(client, "ECHO", "in-step") == b"in-step"


def test_map_replies_parse_in_every_client_combination(client, q):
    job_id = client.execute_command("QPUSH", q, b"\x00payload\xff")
    [job] = client.execute_command("QCLAIM", q, "w1")
    job = assert_map_shape(client, job)
    assert job[b"id"] == job_id and job[b"payload"] == b"\x00payload\xff"
    got = assert_map_shape(client, client.execute_command("QGET", q, job_id))
    assert got[b"state"] == b"in_flight"
    config = assert_map_shape(client, call(client, "CONFIG", "GET", "auto-create"))
    assert config == {b"auto-create": b"yes"}


def test_array_replies_parse_in_every_client_combination(client, q):
    ids = client.execute_command("QPUSHMANY", q, "3", "a", "b", "c")
    assert ids == [1, 2, 3]
    assert client.execute_command("QCLAIM", q, "w", "COUNT", "5", "BLOCK", "10")[2] is not None
    assert client.execute_command("QCLAIM", q, "w", "BLOCK", "10") == []   # empty, not null
    assert client.execute_command("QLIST", "MATCH", q) == [q.encode()]
    t = call(client, "TIME")
    assert isinstance(t, list) and len(t) == 2


def test_error_replies_keep_the_connection_usable_in_every_client_combination(client, q):
    for _ in range(3):
        with pytest.raises(redis.ResponseError):
            client.execute_command("QPUSH", q)
        with pytest.raises(redis.ResponseError, match="NOQUEUE"):
            client.execute_command("QACK", unique("missing"), "1.1.1")
    assert client.execute_command("QPUSH", q, "x") == 1


# -- AUTH -----------------------------------------------------------------------------------

def test_auth_bare_password_without_requirepass_is_an_error(raw):
    c = raw()
    assert replies_before_end(c, b"AUTH pw\r\n") == (
        b"-ERR AUTH <password> called without any password configured for the default user. "
        b"Are you sure your configuration is correct?\r\n")


def test_auth_default_user_without_requirepass_is_ok(raw):
    c = raw()
    assert c.request(b"AUTH default whatever\r\n") == b"+OK\r\n"
    assert c.request(b"QLIST MATCH no-such-queue-*\r\n") == b"*0\r\n"


def test_auth_unknown_user_without_requirepass_is_wrongpass(raw):
    c = raw()
    assert replies_before_end(c, b"AUTH alice whatever\r\n") == (
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n")


NOAUTH_COMMANDS = [
    ("QPUSH", "q", "x"), ("QCLAIM", "q", "w"), ("QINFO", "q"), ("QLIST",), ("ECHO", "x"),
    ("CLIENT", "ID"), ("CONFIG", "GET", "*"), ("INFO",), ("COMMAND", "COUNT"), ("SELECT", "0"),
    ("DBSIZE",), ("TIME",), ("MULTI",), ("QCREATE", "q"),
]


@pytest.mark.parametrize("command", NOAUTH_COMMANDS, ids=lambda c: " ".join(c))
def test_requirepass_refuses_commands_before_auth_with_noauth(secured, command):
    c = Raw(secured.port)
    try:
        assert replies_before_end_noauth(c, hiredis.pack_command(tuple(command))) == (
            b"-NOAUTH Authentication required.\r\n")
    finally:
        c.close()


def replies_before_end_noauth(c: Raw, data: bytes) -> bytes:
    # ECHO needs auth too, so the sentinel is a PING with a message
    c.send(data + hiredis.pack_command(("PING", "--end--")))
    return c.read_until(END_REPLY)[:-len(END_REPLY)]


def test_requirepass_allows_ping_auth_hello_quit_before_auth(secured):
    c = Raw(secured.port)
    try:
        assert c.request(b"PING\r\n") == b"+PONG\r\n"
        got = replies_before_end_noauth(c, b"HELLO 3\r\n")
        assert got.startswith(b"-NOAUTH HELLO must be called with the client already authenticated")
        assert replies_before_end_noauth(c, b"AUTH wrong\r\n") == (
            b"-WRONGPASS invalid username-password pair or user is disabled.\r\n")
        assert replies_before_end_noauth(c, b"QPUSH q x\r\n") == b"-NOAUTH Authentication required.\r\n"
        assert c.request(b"QUIT\r\n") == b"+OK\r\n"
        assert c.read_until_closed() == b""
    finally:
        c.close()


def test_requirepass_auth_then_commands_work(secured):
    c = Raw(secured.port)
    try:
        assert c.request(b"AUTH secret\r\n") == b"+OK\r\n"
        assert c.request(f"QPUSH {unique()} x\r\n".encode()) == b":1\r\n"
        assert c.request(b"AUTH default secret\r\n") == b"+OK\r\n"
        assert c.request(b"AUTH nobody secret\r\n").startswith(b"-WRONGPASS")
    finally:
        c.close()


def test_requirepass_hello_3_auth_setname(secured):
    c = Raw(secured.port)
    try:
        got = replies_before_end_noauth(c, b"HELLO 3 AUTH default wrong\r\n")
        assert got.startswith(b"-WRONGPASS")
        got = replies_before_end_noauth(c, b"HELLO 3 AUTH default secret SETNAME n1\r\nCLIENT GETNAME\r\n")
        assert got.startswith(b"%7\r\n") and got.endswith(b"$2\r\nn1\r\n")
    finally:
        c.close()


@pytest.mark.parametrize("mode", list(CLIENT_MODES))
def test_requirepass_redis_py_connects_with_password(secured, mode):
    c = make_client(secured.port, mode, password="secret")
    try:
        assert c.execute_command("QPUSH", unique(), "x") == 1
        assert c.ping() is True
    finally:
        c.close()
        c.connection_pool.disconnect()


@pytest.mark.parametrize("mode", ["resp2-hiredis", "resp3-hiredis"])
def test_requirepass_redis_py_without_or_with_wrong_password_fails(secured, mode):
    c = make_client(secured.port, mode)
    with pytest.raises(redis.AuthenticationError):
        c.execute_command("QPUSH", "q", "x")
    c.connection_pool.disconnect()
    bad = make_client(secured.port, mode, password="nope")
    with pytest.raises(redis.AuthenticationError):
        bad.execute_command("QPUSH", "q", "x")
    bad.connection_pool.disconnect()


def test_requirepass_unauthenticated_shutdown_is_refused(tmp_path):
    """docs/semantics.md §7: NOAUTH for everything but AUTH/HELLO/PING/QUIT — SHUTDOWN included."""
    secured = Daemon(tmp_path / "shutdown", env={"LEASEQ_REQUIREPASS": "secret"})
    secured.start()
    try:
        c = Raw(secured.port)
        try:
            c.send(b"SHUTDOWN\r\n" + hiredis.pack_command(("PING", "--end--")))
            got = c.read_until(END_REPLY)
        except AssertionError as e:
            got = f"<no reply: {e}>".encode()
        finally:
            c.close()
        alive = secured.proc.poll() is None
    finally:
        secured.kill()
    assert got == b"-NOAUTH Authentication required.\r\n" + END_REPLY and alive, \
        f"unauthenticated SHUTDOWN: reply {got!r}, daemon alive={alive}"


def test_requirepass_reset_makes_the_connection_unauthenticated(secured):
    c = Raw(secured.port)
    try:
        assert c.request(b"AUTH secret\r\n") == b"+OK\r\n"
        assert c.request(b"QLIST MATCH no-such-queue-*\r\n") == b"*0\r\n"
        assert c.request(b"RESET\r\n") == b"+RESET\r\n"
        assert c.request(b"QLIST MATCH no-such-queue-*\r\n") == b"-NOAUTH Authentication required.\r\n"
    finally:
        c.close()


# -- SELECT / QUIT / RESET ------------------------------------------------------------------

def test_select_0_is_ok_and_other_indexes_are_out_of_range(raw):
    c = raw()
    assert c.request(b"SELECT 0\r\n") == b"+OK\r\n"
    assert c.request(b"SELECT 1\r\n") == b"-ERR DB index is out of range\r\n"
    assert c.request(b"SELECT x\r\n") == b"-ERR value is not an integer or out of range\r\n"


def test_redis_py_with_db_1_cannot_connect_and_db_0_can(daemon):
    bad = no_retry_client(daemon, db=1)
    with pytest.raises(redis.ResponseError, match="DB index is out of range"):
        bad.ping()
    bad.close()
    good = daemon.client(protocol=3, db=0)
    assert good.ping() is True
    good.close()


def test_quit_replies_ok_then_closes_and_ignores_what_follows(raw):
    c = raw()
    name = unique().encode()
    c.send(b"PING\r\nQUIT\r\nQPUSH %b x\r\n" % name)
    assert c.read_until_closed() == b"+PONG\r\n+OK\r\n"
    probe = raw()
    assert probe.request(b"QINFO %b\r\n" % name).startswith(b"-NOQUEUE")


def test_reset_returns_to_resp2_and_clears_name(raw):
    c = raw()
    got = replies_before_end(c, b"HELLO 3 SETNAME n1\r\nCLIENT GETNAME\r\n")
    assert got.endswith(b"$2\r\nn1\r\n")
    assert c.request(b"RESET\r\n") == b"+RESET\r\n"
    assert c.request(b"CLIENT GETNAME\r\n") == b"$-1\r\n"
    assert c.request(b"QGET nosuch 1\r\n").startswith(b"-NOQUEUE")


def test_reset_inside_multi_discards_the_transaction(raw):
    """Redis runs RESET at once even inside MULTI (it is never queued)."""
    c = raw()
    name = unique().encode()
    assert replies_before_end(c, b"MULTI\r\nQPUSH %b x\r\nRESET\r\nEXEC\r\n" % name) == (
        b"+OK\r\n+QUEUED\r\n+RESET\r\n-ERR EXEC without MULTI\r\n")
    assert c.request(b"QINFO %b\r\n" % name).startswith(b"-NOQUEUE")


def test_quit_inside_multi_closes_without_running_the_transaction(raw):
    """Redis runs QUIT at once even inside MULTI: +OK, close, queued commands dropped."""
    c = raw()
    name = unique().encode()
    c.send(b"MULTI\r\nQPUSH %b x\r\nQUIT\r\nEXEC\r\n" % name)
    assert c.read_until_closed() == b"+OK\r\n+QUEUED\r\n+OK\r\n"
    probe = raw()
    assert probe.request(b"QINFO %b\r\n" % name).startswith(b"-NOQUEUE")


# -- CLIENT -----------------------------------------------------------------------------------

def test_client_setname_getname_id(client):
    assert call(client, "CLIENT", "GETNAME") is None
    assert call(client, "CLIENT", "SETNAME", "worker-7") in (b"OK", "OK")
    assert call(client, "CLIENT", "GETNAME") == b"worker-7"
    cid = call(client, "CLIENT", "ID")
    assert isinstance(cid, int) and cid > 0


def test_client_setname_with_space_is_refused(r):
    assert error_text(r, "CLIENT", "SETNAME", "bad name") == (
        "Client names cannot contain spaces, newlines or special characters.")


def test_client_ids_differ_per_connection(daemon):
    a, b = daemon.client(protocol=2), daemon.client(protocol=3)
    ida, idb = a.execute_command("CLIENT", "ID"), b.execute_command("CLIENT", "ID")
    assert ida != idb
    a.close()
    b.close()


def test_client_info_is_one_line_with_resp_and_lib_name(client):
    info = call(client, "CLIENT", "INFO")
    text = info.decode() if isinstance(info, bytes) else info
    assert text.endswith("\n") and text.count("\n") == 1
    fields = dict(kv.split("=", 1) for kv in text.split())
    assert fields["id"] == str(call(client, "CLIENT", "ID"))
    assert fields["resp"] == str(client.proto)
    assert fields["db"] == "0"
    assert fields["lib-name"] == "redis-py"   # redis-py sends CLIENT SETINFO on connect


def test_client_info_is_verbatim_in_resp3_and_bulk_in_resp2(raw):
    c = raw()
    assert c.request(b"CLIENT INFO\r\n", b"\n\r\n").startswith(b"$")
    replies_before_end(c, b"HELLO 3\r\n")
    got = c.request(b"CLIENT INFO\r\n", b"\n\r\n")
    assert got.startswith(b"=") and b"\r\ntxt:id=" in got and b" resp=3 " in got


def test_client_setinfo_lib_name_and_version(r):
    assert r.execute_command("CLIENT", "SETINFO", "LIB-NAME", "mylib") == b"OK"
    assert r.execute_command("CLIENT", "SETINFO", "LIB-VER", "1.2.3") == b"OK"
    text = r.execute_command("CLIENT", "INFO").decode()
    assert " lib-name=mylib " in text and " lib-ver=1.2.3" in text
    assert "Unrecognized option" in error_text(r, "CLIENT", "SETINFO", "LIB-COLOR", "red")


def test_client_list_shows_every_connection(daemon, r):
    other = daemon.client(protocol=3, client_name="other-conn")
    other_id = other.execute_command("CLIENT", "ID")
    my_id = r.execute_command("CLIENT", "ID")
    lines = r.execute_command("CLIENT", "LIST").decode().strip().split("\n")
    ids = {line.split()[0] for line in lines}
    assert {f"id={my_id}", f"id={other_id}"} <= ids
    [mine] = [line for line in lines if line.startswith(f"id={other_id} ")]
    assert " name=other-conn " in mine and " resp=3 " in mine
    only = r.execute_command("CLIENT", "LIST", "ID", str(other_id)).decode().strip().split("\n")
    assert len(only) == 1 and only[0].startswith(f"id={other_id} ")
    other.close()


def test_client_kill_by_id_closes_that_connection(r, raw):
    victim = raw()
    victim_id = int(victim.request(b"CLIENT ID\r\n")[1:-2])
    assert r.execute_command("CLIENT", "KILL", "ID", str(victim_id)) == 1
    assert victim.read_until_closed() == b""
    assert r.execute_command("CLIENT", "KILL", "ID", str(victim_id)) == 0
    assert r.ping() is True


def test_client_kill_old_form_by_address(r, raw):
    victim = raw()
    line = victim.request(b"CLIENT INFO\r\n", b"\n\r\n").decode()
    addr = dict(kv.split("=", 1) for kv in line.split("\r\n", 1)[1].split())["addr"]
    assert r.execute_command("CLIENT", "KILL", addr) == b"OK"
    assert victim.read_until_closed() == b""
    assert error_text(r, "CLIENT", "KILL", addr) == "No such client"


@pytest.mark.parametrize("request_, reply", [
    (b"CLIENT MAINT_NOTIFICATIONS ON moving-endpoint-type internal-ip\r\n", b"+OK\r\n"),
    (b"CLIENT MAINT_NOTIFICATIONS off\r\n", b"+OK\r\n"),
    (b"CLIENT MAINT_NOTIFICATIONS maybe\r\n", b"-ERR syntax error\r\n"),
    (b"CLIENT MAINT_NOTIFICATIONS\r\n", b"-ERR wrong number of arguments for 'client|maint_notifications' command\r\n"),
    (b"CLIENT NO-EVICT on\r\n", b"+OK\r\n"),
    (b"CLIENT NO-TOUCH OFF\r\n", b"+OK\r\n"),
    (b"CLIENT NO-TOUCH sometimes\r\n", b"-ERR syntax error\r\n"),
    (b"CLIENT GETREDIR\r\n", b":-1\r\n"),
])
def test_client_subcommands_clients_send_on_connect(raw, request_, reply):
    """node-redis 5/6 fail their connect on an error to MAINT_NOTIFICATIONS;
    a single leaseq has no maintenance events, so +OK promises nothing it breaks."""
    c = raw()
    assert replies_before_end(c, request_) == reply


def test_client_unknown_subcommand_wording(r):
    assert error_text(r, "CLIENT", "NOSUCH") == "unknown subcommand 'NOSUCH'. Try CLIENT HELP."


# -- COMMAND -------------------------------------------------------------------------------------

Q_COMMANDS = {b"qcreate", b"qalter", b"qdrop", b"qlist", b"qinfo", b"qlen", b"qpush", b"qpushmany",
              b"qclaim", b"qack", b"qnack", b"qextend", b"qget"}
CONNECTION_COMMANDS = {b"ping", b"echo", b"hello", b"auth", b"select", b"quit", b"reset", b"client",
                       b"command", b"info", b"config", b"time", b"dbsize", b"shutdown",
                       b"multi", b"exec", b"discard"}


def test_command_count_and_list_agree_and_cover_leaseq_commands(client):
    names = call(client, "COMMAND", "LIST")
    assert isinstance(names, list)
    assert len(names) == len(set(names)) == call(client, "COMMAND", "COUNT")
    assert Q_COMMANDS | CONNECTION_COMMANDS <= set(names)
    assert len(call(client, "COMMAND")) == len(names)


def test_command_info_describes_arity_flags_and_keys(client):
    qpush, missing, qinfo = call(client, "COMMAND", "INFO", "qpush", "nosuchcmd", "QINFO")
    assert missing is None
    assert qpush[0] == b"qpush" and qpush[1] == -3
    assert b"write" in qpush[2]
    assert qpush[3:6] == [1, 1, 1]
    assert qinfo[0] == b"qinfo" and qinfo[1] == 2 and b"readonly" in qinfo[2]


def test_command_docs_gives_real_docs_for_every_command(client):
    docs = assert_map_shape(client, call(client, "COMMAND", "DOCS"))
    assert set(docs) == set(call(client, "COMMAND", "LIST"))
    qpush = as_map(docs[b"qpush"])
    assert qpush[b"summary"] and qpush[b"group"] and qpush[b"since"]
    args = [as_map(a) for a in qpush[b"arguments"]]
    assert [a[b"name"] for a in args[:2]] == [b"queue", b"payload"]
    one = assert_map_shape(client, call(client, "COMMAND", "DOCS", "qclaim"))
    assert list(one) == [b"qclaim"]


# -- INFO ------------------------------------------------------------------------------------

def info_text(c, *section) -> str:
    got = call(c, "INFO", *section)
    return got.decode() if isinstance(got, bytes) else got


def test_info_has_all_sections_and_never_says_loading(client):
    text = info_text(client)
    for header in ("# Server", "# Clients", "# Memory", "# Persistence", "# Stats", "# Queues"):
        assert header in text
    assert "\r\nloading:0\r\n" in text
    assert "loading:1" not in text


@pytest.mark.parametrize("section,key", [
    ("server", "leaseq_version"), ("clients", "connected_clients"), ("memory", "used_memory_rss"),
    ("persistence", "loading"), ("stats", "total_commands_processed"),
])
def test_info_section_alone(r, section, key):
    text = info_text(r, section)
    assert text.startswith(f"# {section.capitalize()}\r\n")
    assert text.count("# ") == 1
    fields = dict(line.split(":", 1) for line in text.strip().split("\r\n")[1:])
    assert key in fields


def test_info_server_says_which_flavour_runs(r):
    """compiled (daemon/_resp.pyx built by bin/setup) unless LEASEQ_PURE=1, which
    the daemon inherits from the test run (.ci/run's second pass)."""
    fields = dict(line.split(":", 1) for line in info_text(r, "server").strip().split("\r\n")[1:])
    assert fields["leaseq_flavour"] == ("pure" if os.environ.get("LEASEQ_PURE") == "1" else "compiled")
    # built from a profile as bin/setup builds it (the daemon loads the modules this process loads), never pure
    from leaseq.daemon.flavour import PROFILE_GUIDED
    assert fields["leaseq_profile_guided"] == str(int(PROFILE_GUIDED and os.environ.get("LEASEQ_PURE") != "1"))


def test_info_persistence_reports_loading_0_and_fsync_policy(r):
    fields = dict(line.split(":", 1) for line in info_text(r, "persistence").strip().split("\r\n")[1:])
    assert fields["loading"] == "0"
    assert fields["default_durability"] == "fsync"
    assert int(fields["wal_segments"]) >= 1


def test_info_queues_has_one_line_per_queue(fresh_r):
    r = fresh_r
    r.execute_command("QPUSH", "alpha", "x")
    r.execute_command("QPUSH", "alpha", "y", "DELAY", "60000")
    r.execute_command("QCREATE", "beta", "DURABILITY", "memory")
    lines = info_text(r, "queues").strip().split("\r\n")
    assert lines[0] == "# Queues"
    assert lines[1:] == ["alpha:ready=1,delayed=1,in_flight=0,dead=0,completed=0,waiting=0,cancelled=0,durability=fsync",
                         "beta:ready=0,delayed=0,in_flight=0,dead=0,completed=0,waiting=0,cancelled=0,durability=memory"]


def test_info_clients_counts_connections(daemon, r):
    others = [daemon.client(protocol=2) for _ in range(3)]
    for o in others:
        o.ping()
    fields = dict(line.split(":", 1) for line in info_text(r, "clients").strip().split("\r\n")[1:])
    assert int(fields["connected_clients"]) >= 4
    for o in others:
        o.close()


def test_info_is_verbatim_in_resp3(raw):
    c = raw()
    replies_before_end(c, b"HELLO 3\r\n")
    got = c.request(b"INFO server\r\n", b"\r\n\r\n")
    assert got.startswith(b"=") and b"\r\ntxt:# Server\r\n" in got


# -- CONFIG --------------------------------------------------------------------------------

SETTINGS = {"port", "bind", "dir", "loglevel", "requirepass", "default-durability", "lease-durability",
            "fsync-interval", "segment-size", "snapshot-min-bytes", "archive-dir", "http-port", "http-bind",
            "auto-create", "maxclients", "timeout", "tcp-keepalive", "proto-max-bulk-len",
            "max-payload", "max-args", "client-output-buffer-limit", "maxmemory", "enable-debug-command",
            "protected-mode", "tls-port", "tls-bind", "tls-cert-file", "tls-key-file", "tls-ca-cert-file",
            "tls-auth-clients", "tls-protocols", "replicaof", "masteruser", "masterauth", "repl-backlog-size", "repl-timeout",
            "replica-priority", "replica-announce-ip", "replica-announce-port", "min-replicas-to-write",
            "min-replicas-max-lag", "min-replicas-to-ack", "search-slice", "history-hours", "shutdown-timeout",
            "shutdown-on-sigterm", "shutdown-on-sigint", "repl-ping-replica-period", "slowlog-log-slower-than",
            "slowlog-max-len"}
# Redis settings tools read, answered as views of what leaseq does (docs/semantics.md §2.6)
REDIS_VIEWS = {"save", "appendonly", "appendfsync", "databases", "maxmemory-policy"}


def test_config_get_lists_leaseq_settings(client):
    everything = assert_map_shape(client, call(client, "CONFIG", "GET", "*"))
    assert {k.decode() for k in everything} == SETTINGS | REDIS_VIEWS
    assert everything[b"port"] == str(client.connection_pool.connection_kwargs["port"]).encode()
    some = as_map(call(client, "CONFIG", "GET", "max*", "timeout"))
    assert set(some) == {b"maxclients", b"max-payload", b"max-args", b"maxmemory", b"maxmemory-policy", b"timeout"}


def test_config_set_changes_a_setting(fresh_r):
    r = fresh_r
    assert r.execute_command("CONFIG", "SET", "fsync-interval", "250") == b"OK"
    assert as_map(r.execute_command("CONFIG", "GET", "fsync-interval")) == {b"fsync-interval": b"250"}


def test_config_set_immutable_setting_is_refused(fresh_r):
    r = fresh_r
    assert error_text(r, "CONFIG", "SET", "port", "1234") == (
        "CONFIG SET failed (possibly related to argument 'port') - can't set immutable config")
    assert error_text(r, "CONFIG", "SET", "dir", "/tmp").endswith("can't set immutable config")


def test_config_set_bad_value_is_refused_and_changes_nothing(fresh_r):
    r = fresh_r
    assert error_text(r, "CONFIG", "SET", "auto-create", "maybe").startswith(
        "CONFIG SET failed (possibly related to argument 'auto-create')")
    assert "must be an integer" in error_text(r, "CONFIG", "SET", "fsync-interval", "soon")
    # several pairs are all-or-nothing
    assert "fsync-interval" in error_text(r, "CONFIG", "SET", "auto-create", "no", "fsync-interval", "x")
    assert as_map(r.execute_command("CONFIG", "GET", "auto-create")) == {b"auto-create": b"yes"}


def test_config_set_unknown_setting_is_refused(fresh_r):
    r = fresh_r
    assert "Unknown option" in error_text(r, "CONFIG", "SET", "no-such-setting", "1")


def test_config_set_auto_create_no_makes_push_and_claim_on_missing_queue_noqueue(fresh_r):
    r = fresh_r
    r.execute_command("QCREATE", "exists")
    assert r.execute_command("CONFIG", "SET", "auto-create", "no") == b"OK"
    assert error_text(r, "QPUSH", "missing", "x") == "NOQUEUE no such queue 'missing'"
    assert error_text(r, "QCLAIM", "missing", "w") == "NOQUEUE no such queue 'missing'"
    assert r.execute_command("QPUSH", "exists", "x") == 1
    assert r.execute_command("DBSIZE") == 1


def test_config_set_max_payload_at_run_time(fresh_r):
    r = fresh_r
    assert r.execute_command("CONFIG", "SET", "max-payload", "10") == b"OK"
    assert r.execute_command("QPUSH", "small", b"x" * 10) == 1
    assert error_text(r, "QPUSH", "small", b"x" * 11) == "TOOBIG payload of 11 bytes exceeds max-payload (10 bytes)"


# -- TIME / DBSIZE -----------------------------------------------------------------------------

def test_time_is_seconds_and_microseconds(client):
    before = time.time()
    sec, usec = call(client, "TIME")
    after = time.time()
    assert isinstance(sec, bytes) and isinstance(usec, bytes)
    t = int(sec) + int(usec) / 1e6
    assert 0 <= int(usec) < 1_000_000
    assert before - 1 <= t <= after + 1


def test_dbsize_counts_queues(fresh_r):
    r = fresh_r
    assert r.execute_command("DBSIZE") == 0
    r.execute_command("QCREATE", "a")
    r.execute_command("QPUSH", "b", "x")
    r.execute_command("QCLAIM", "c", "w")
    assert r.execute_command("DBSIZE") == 3
    r.execute_command("QDROP", "a")
    assert r.execute_command("DBSIZE") == 2


# -- MULTI / EXEC / DISCARD ----------------------------------------------------------------------

def test_multi_exec_queues_then_replies_with_array(raw):
    c = raw()
    got = replies_before_end(c, b"MULTI\r\nQPUSH %b a\r\nQPUSH %b b\r\nQLEN %b\r\nEXEC\r\n" % ((unique().encode(),) * 3))
    assert got == b"+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*3\r\n:1\r\n:2\r\n:2\r\n"


def test_multi_queue_time_error_makes_exec_abort_and_nothing_runs(raw):
    c = raw()
    name = unique().encode()
    got = replies_before_end(c, b"MULTI\r\nQPUSH %b a\r\nNOSUCH x\r\nQPUSH t\r\nEXEC\r\n" % name)
    lines = got.split(b"\r\n")
    assert lines[:2] == [b"+OK", b"+QUEUED"]
    assert lines[2].startswith(b"-ERR unknown command 'NOSUCH'")
    assert lines[3:] == [b"-ERR wrong number of arguments for 'qpush' command",
                         b"-EXECABORT Transaction discarded because of previous errors.", b""]
    assert c.request(b"QINFO %b\r\n" % name).startswith(b"-NOQUEUE")


def test_multi_arity_error_aborts_exec_via_redis_py(r, q):
    assert r.execute_command("MULTI") == b"OK"
    assert r.execute_command("QPUSH", q, "a") == b"QUEUED"
    with pytest.raises(redis.ResponseError):
        r.execute_command("QPUSH", q)
    with pytest.raises(redis.exceptions.ExecAbortError):
        r.execute_command("EXEC")
    assert "NOQUEUE" in error_text(r, "QINFO", q)


def test_multi_runtime_error_is_reported_in_its_slot(raw):
    """An error raised while EXEC runs a command is that command's reply (as in Redis)."""
    c = raw()
    got = replies_before_end(c, b"MULTI\r\nQPUSH %b a\r\nQPUSH %b b PRIORITY 99\r\nEXEC\r\n" % ((unique().encode(),) * 2))
    assert got == b"+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n:1\r\n-ERR PRIORITY must be between 0 and 9\r\n"


def test_discard_drops_the_queued_commands(raw):
    c = raw()
    name = unique().encode()
    assert replies_before_end(c, b"MULTI\r\nQPUSH %b a\r\nDISCARD\r\nQINFO %b\r\n" % (name, name)) == (
        b"+OK\r\n+QUEUED\r\n+OK\r\n-NOQUEUE no such queue '%b'\r\n" % name)


def test_exec_and_discard_without_multi_and_nested_multi(raw):
    c = raw()
    assert replies_before_end(c, b"EXEC\r\nDISCARD\r\nMULTI\r\nMULTI\r\nEXEC\r\n") == (
        b"-ERR EXEC without MULTI\r\n-ERR DISCARD without MULTI\r\n+OK\r\n"
        b"-ERR MULTI calls can not be nested\r\n*0\r\n")


def test_exec_pushes_become_visible_together(daemon, r, q):
    r.execute_command("QCREATE", q)
    observer = daemon.client(protocol=2)
    assert r.execute_command("MULTI") == b"OK"
    for payload in ("a", "b", "c"):
        assert r.execute_command("QPUSH", q, payload) == b"QUEUED"
    assert observer.execute_command("QLEN", q) == 0      # nothing applied before EXEC
    assert r.execute_command("EXEC") == [1, 2, 3]
    assert observer.execute_command("QLEN", q) == 3
    observer.close()


def test_exec_acks_a_job_and_pushes_its_follow_up_in_one_step(r, q):
    stage1, stage2 = q + ":1", q + ":2"
    r.execute_command("QPUSH", stage1, "x")
    [job] = r.execute_command("QCLAIM", stage1, "w")
    token = as_map(job)[b"lease"]
    r.execute_command("MULTI")
    r.execute_command("QACK", stage1, token)
    r.execute_command("QPUSH", stage2, "y")
    assert r.execute_command("EXEC") == [1, 1]
    assert r.execute_command("QLEN", stage1) == 0
    assert as_map(r.execute_command("QINFO", stage1))[b"in_flight"] == 0
    assert r.execute_command("QLEN", stage2) == 1


def test_qclaim_block_inside_multi_does_not_block(raw):
    c = raw()
    got = replies_before_end(c, b"MULTI\r\nQCLAIM %b w BLOCK 0\r\nEXEC\r\n" % unique().encode(), timeout=3)
    assert got == b"+OK\r\n+QUEUED\r\n*1\r\n*0\r\n"


def test_watch_is_refused_and_hello_inside_multi_is_refused(raw):
    c = raw()
    assert replies_before_end(c, b"WATCH q\r\n").startswith(b"-ERR ")
    got = replies_before_end(c, b"MULTI\r\nHELLO 3\r\nEXEC\r\n")
    assert got.startswith(b"+OK\r\n-ERR Command not allowed inside a transaction")
    assert got.endswith(b"-EXECABORT Transaction discarded because of previous errors.\r\n")


def test_redis_py_transaction_pipeline_in_every_client_combination(client, q):
    """redis-py's pipeline() wraps the batch in MULTI/EXEC by default."""
    p = client.pipeline()
    for i in range(5):
        p.execute_command("QPUSH", q, f"job-{i}")
    p.execute_command("QLEN", q)
    p.execute_command("QGET", q, "999")
    assert p.execute() == [1, 2, 3, 4, 5, 5, None]


# -- pipelining ----------------------------------------------------------------------------

def test_many_commands_in_one_write_are_answered_in_order(raw):
    c = raw()
    data, expected = [], []
    for i in range(600):
        msg = f"m{i}".encode()
        if i % 3 == 0:
            data.append(b"ECHO " + msg + b"\r\n")          # inline between multibulk commands
        else:
            data.append(hiredis.pack_command(("ECHO", msg)))
        expected.append(b"$%d\r\n%b\r\n" % (len(msg), msg))
    blob = b"".join(data)
    c.send(blob)
    want = b"".join(expected)
    assert c.read_exactly(len(want), timeout=10) == want


def test_pipeline_split_byte_by_byte_is_parsed_the_same(raw):
    c = raw()
    name = unique().encode()
    blob = (hiredis.pack_command(("QPUSH", name, "a b")) + b"QPUSH %b \"c d\"\r\n" % name
            + hiredis.pack_command(("QLEN", name)) + b"PING\r\n")
    for i in range(len(blob)):
        c.send(blob[i:i + 1])
    assert c.read_exactly(len(b":1\r\n:2\r\n:2\r\n+PONG\r\n")) == b":1\r\n:2\r\n:2\r\n+PONG\r\n"


def test_redis_py_non_transaction_pipeline_replies_in_order(client, q):
    p = client.pipeline(transaction=False)
    for i in range(300):
        p.execute_command("QPUSH", q, f"{i}")
    p.execute_command("QCLAIM", q, "w", "COUNT", "300")
    replies = p.execute()
    assert replies[:300] == list(range(1, 301))
    claimed = [as_map(j) for j in replies[300]]
    assert [j[b"payload"] for j in claimed] == [str(i).encode() for i in range(300)]


# -- error wording (exactly as Redis) ------------------------------------------------------------

def test_unknown_command_wording_is_exactly_redis(raw):
    """Redis (server.c) formats each argument as "'%.*s' ": a space follows every
    argument, the last one too."""
    c = raw()
    assert replies_before_end(c, b"NOSUCH a b\r\n") == (
        b"-ERR unknown command 'NOSUCH', with args beginning with: 'a' 'b' \r\n")


def test_unknown_command_does_not_close_the_connection(r):
    msg = error_text(r, "NOSUCH", "arg1")
    assert msg.startswith("unknown command 'NOSUCH', with args beginning with: 'arg1'")
    assert r.ping() is True


def test_wrong_arity_wording(raw):
    c = raw()
    assert replies_before_end(c, b"QPUSH q\r\nqPuSh\r\nQINFO a b\r\n") == (
        b"-ERR wrong number of arguments for 'qpush' command\r\n"
        b"-ERR wrong number of arguments for 'qpush' command\r\n"
        b"-ERR wrong number of arguments for 'qinfo' command\r\n")


def test_not_an_integer_wording(raw):
    c = raw()
    assert replies_before_end(c, b"QCLAIM q w COUNT abc\r\nQCLAIM q w COUNT 1.5\r\nQPUSH q x PRIORITY 99999999999999999999\r\n") == (
        b"-ERR value is not an integer or out of range\r\n" * 3)


def test_syntax_error_wording(raw):
    c = raw()
    assert replies_before_end(c, b"QCLAIM q w BOGUS 1\r\nQCREATE q LEASE\r\nQPUSH q x PRIORITY 1 PRIORITY 2\r\n") == (
        b"-ERR syntax error\r\n" * 3)


# -- protocol errors on a raw socket ---------------------------------------------------------------

@pytest.mark.parametrize("bad,message", [
    (b"*1\r\n$abc\r\n", b"invalid bulk length"),
    (b"*2\r\n$4\r\nECHO\r\n$-5\r\n", b"invalid bulk length"),
    (b"*abc\r\n", b"invalid multibulk length"),
    (b"*-5\r\n", b"invalid multibulk length"),
    (b"*1\r\n:1\r\n", b"expected '$', got ':'"),
    (b'ECHO "unbalanced\r\n', b"unbalanced quotes in request"),
])
def test_malformed_request_gets_protocol_error_then_close(raw, bad, message):
    c = raw()
    c.send(bad)
    assert c.read_until_closed() == b"-ERR Protocol error: " + message + b"\r\n"


def test_commands_before_the_bad_bytes_in_the_same_write_are_answered(raw):
    c = raw()
    name = unique().encode()
    c.send(hiredis.pack_command(("QPUSH", name, "x")) + b"PING\r\n" + hiredis.pack_command(("ECHO", "hi"))
           + b"*1\r\n$abc\r\n" + hiredis.pack_command(("PING",)))
    assert c.read_until_closed() == b":1\r\n+PONG\r\n$2\r\nhi\r\n-ERR Protocol error: invalid bulk length\r\n"
    probe = raw()
    assert probe.request(b"QLEN %b\r\n" % name) == b":1\r\n"


def test_huge_multibulk_count_is_refused_with_protocol_error(fresh):
    """docs/semantics.md §6: a count far above max-args gets a clear error and a close
    (Redis: invalid multibulk length)."""
    c = Raw(fresh.port)
    c.send(b"*2147483647\r\n")
    try:
        got = c.read_until_closed(timeout=10)
    except AssertionError as e:
        got = f"<still open: {e}>".encode()
    c.close()
    assert got == b"-ERR Protocol error: invalid multibulk length\r\n"


def _worst_ping(r, seconds: float) -> float:
    worst, end = 0.0, time.monotonic() + seconds
    for _ in range(100_000):
        if time.monotonic() > end:
            break
        t = time.monotonic()
        assert r.ping() is True
        worst = max(worst, time.monotonic() - t)
    return worst


def test_client_sending_a_huge_multibulk_count_does_not_stall_others(fresh, fresh_r):
    """docs/semantics.md §6: the daemon keeps serving everyone else while it refuses the
    count and when that client goes away."""
    r = fresh_r
    r.ping()
    tries = []
    for _ in range(3):      # a slow PING in every one of three tries is the daemon's doing, not a stalled machine's
        c = Raw(fresh.port)
        c.send(b"*2147483647\r\n")
        while_open = _worst_ping(r, 1.5)
        c.close()
        after_close = _worst_ping(r, 1.5)
        tries.append((while_open, after_close))
        if max(while_open, after_close) < 0.5:
            break
    else:
        raise AssertionError("PINGs from another client took up to (s, after '*2147483647' arrived / after that "
                             "client closed), in each try: " + ", ".join(f"{a:.2f}/{b:.2f}" for a, b in tries))


# -- inline commands -------------------------------------------------------------------------------

def test_inline_ping(raw):
    c = raw()
    assert c.request(b"PING\r\n") == b"+PONG\r\n"
    assert c.request(b"ping\n") == b"+PONG\r\n"      # LF alone ends a line too


def test_inline_quoted_arguments(raw):
    c = raw()
    assert c.request(b'ECHO "hello world"\r\n', b"world\r\n") == b"$11\r\nhello world\r\n"
    assert c.request(b"ECHO 'single quoted'\r\n", b"quoted\r\n") == b"$13\r\nsingle quoted\r\n"
    assert c.request(b'ECHO "\\x41\\tB\\n"\r\n', b"B\n\r\n") == b"$4\r\nA\tB\n\r\n"
    name = unique().encode()
    assert c.request(b'QPUSH %b "a b c" PRIORITY 9\r\n' % name) == b":1\r\n"
    got = replies_before_end(c, b"QGET %b 1\r\n" % name)
    assert b"$7\r\npayload\r\n$5\r\na b c\r\n" in got and b"$8\r\npriority\r\n:9\r\n" in got


def test_inline_empty_lines_get_no_reply(raw):
    c = raw()
    assert replies_before_end(c, b"\r\n\r\n   \r\n\n\t\r\nPING\r\n\r\n") == b"+PONG\r\n"


def test_inline_and_multibulk_mixed_in_one_write(raw):
    c = raw()
    got = replies_before_end(c, b"\r\n" + hiredis.pack_command(("PING",)) + b"ECHO x\r\n"
                             + hiredis.pack_command(("ECHO", "y")) + b"PING z\r\n")
    assert got == b"+PONG\r\n$1\r\nx\r\n$1\r\ny\r\n$1\r\nz\r\n"


# -- a daemon that gets garbage keeps serving ---------------------------------------------------------

GARBAGE = [
    b"\x00\xff\xfe\xfd" * 64 + b"\r\n",
    b"$$$$\r\n:::\r\n",
    b"*1\r\n$abc\r\n",
    b"*2\r\n$4\r\nECHO\r\n",                         # half a command, then close
    b"\r\n" * 1000,
    b"*1\r\n*1\r\n$4\r\nPING\r\n",
    b'ECHO "never closed',
    b"+OK\r\n-ERR\r\n",
    b"*1\r\n$4\r\nPI",
]


def test_garbage_from_many_clients_never_stops_the_daemon(fresh, fresh_r):
    daemon, r = fresh, fresh_r
    rng = random.Random(20240601)
    blobs = GARBAGE + [b"\x00" + rng.randbytes(2048) for _ in range(8)]
    for blob in blobs:
        c = Raw(daemon.port)
        try:
            c.send(blob)
        except OSError:
            pass
        c.close()
    # still serving, state intact
    assert r.ping() is True
    assert r.execute_command("QPUSH", "after-garbage", "x") == 1
    assert r.execute_command("QLEN", "after-garbage") == 1
    assert daemon.proc.poll() is None
    fresh = daemon.client(protocol=3)
    assert fresh.execute_command("QPUSH", "after-garbage", "y") == 2
    fresh.close()


def test_garbage_while_another_client_is_blocked_does_not_disturb_it(fresh, fresh_r):
    daemon, r = fresh, fresh_r
    results = []

    def claimer():
        c = daemon.client(protocol=2)
        results.append(c.execute_command("QCLAIM", "g", "w", "BLOCK", "5000"))
        c.close()

    r.execute_command("QCREATE", "g")
    t = CheckedThread(target=claimer)
    t.start()
    wait_for(lambda: as_map(r.execute_command("QINFO", "g"))[b"consumers_blocked"] == 1, what="claimer blocked")
    for blob in GARBAGE:
        c = Raw(daemon.port)
        c.send(blob)
        c.close()
    r.execute_command("QPUSH", "g", "payload")
    t.join(10)
    assert not t.is_alive()
    assert t.failure is None, t.failure
    [job] = results[0]
    assert as_map(job)[b"payload"] == b"payload"


def _flood_until_closed(port: int, q: str) -> bool:
    """Pipeline 300 QPEEKs of a 100 KB job in one write and read nothing:
    30 MB of replies, far more than the socket buffers hold.  True when
    the server closes the connection."""
    s = socket.create_connection((HOST, port), timeout=10)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        s.sendall(hiredis.pack_command(("QPEEK", q)) * 300)
        time.sleep(0.5)                 # (a reader that does not read: let the replies pile up)
        try:
            while True:
                if not s.recv(1 << 20):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False
    finally:
        s.close()


def test_a_client_that_does_not_read_is_disconnected_past_the_output_buffer_limit(own):
    """docs/semantics.md §6: past client-output-buffer-limit a client is
    disconnected; everyone else is served on, and the job is untouched.
    Also after CONFIG SET lowers the limit for connections already open."""
    d = own(env={"LEASEQ_CLIENT_OUTPUT_BUFFER_LIMIT": "1000000"})
    c = d.client(protocol=2)
    q = unique("obuf")
    jid = c.execute_command("QPUSH", q, b"x" * 100_000)
    assert _flood_until_closed(d.port, q)
    assert c.execute_command("PING") is True
    assert c.execute_command("QLEN", q) == 1 and c.execute_command("QGET", q, jid) is not None

    c.execute_command("CONFIG", "SET", "client-output-buffer-limit", "67108864")
    s = socket.create_connection((HOST, d.port), timeout=10)     # opened under the high limit
    try:
        s.sendall(hiredis.pack_command(("PING",)))
        assert s.recv(100) == b"+PONG\r\n"
        c.execute_command("CONFIG", "SET", "client-output-buffer-limit", "1000000")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        s.sendall(hiredis.pack_command(("QPEEK", q)) * 300)
        time.sleep(0.5)
        closed = False
        try:
            while True:
                if not s.recv(1 << 20):
                    closed = True
                    break
        except (ConnectionResetError, BrokenPipeError):
            closed = True
        except socket.timeout:
            pass
        assert closed
    finally:
        s.close()
    assert c.execute_command("PING") is True
