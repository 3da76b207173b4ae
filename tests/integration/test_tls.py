"""The TLS listener (docs/operations.md, "TLS"): rediss:// with redis-py and
redis-cli --tls beside the plain port, everything else unchanged over it,
and each refused handshake (plain text, no certificate, another CA, a TLS
version not allowed) closing only its own socket while a TLS client is
served meanwhile, counted and logged as one line, never a traceback.
Start-up refusals for unusable files are here too."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import threading

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from harness import HOST, LEASEQ, CheckedThread, Daemon, as_map, free_port, unique, wait_for
from harness_tls import tls_client, tls_env


def daemon_with_tls(directory, pki, auth_clients: str = "yes", **more) -> Daemon:
    d = Daemon(str(directory / "data"), env=tls_env(pki, free_port(), auth_clients, **more))
    d.tls_port = int(d.env["LEASEQ_TLS_PORT"])
    return d.start()


@pytest.fixture(scope="module")
def tls_daemon(tmp_path_factory, pki):
    d = daemon_with_tls(tmp_path_factory.mktemp("tls"), pki)
    yield d
    d.stop()


@pytest.fixture(scope="module")
def optional_daemon(tmp_path_factory, pki):
    """tls-auth-clients optional, and TLS 1.3 only."""
    d = daemon_with_tls(tmp_path_factory.mktemp("tls-optional"), pki, "optional",
                        LEASEQ_TLS_PROTOCOLS="TLSv1.3")
    yield d
    d.stop()


def over_tls(d: Daemon, pki, cert: str | None = "client", **kw) -> redis.Redis:
    """redis-py on the TLS port, without retries: a refused handshake must
    show, not be tried again."""
    return tls_client(pki, d.tls_port, cert, retry=Retry(NoBackoff(), 0), **kw)


def stats(c) -> dict:
    return c.info("stats")


def handshake_lines(d: Daemon) -> list[str]:
    return [line for line in d.log().splitlines() if "TLS handshake with" in line]


# -- clients over TLS -------------------------------------------------------------------------------

def test_redis_py_rediss_url_pushes_claims_and_acks(tls_daemon, pki):
    q = unique()
    url = (f"rediss://{HOST}:{tls_daemon.tls_port}/0?ssl_ca_certs={pki.ca}&ssl_certfile={pki.client_cert}"
           f"&ssl_keyfile={pki.client_key}&ssl_cert_reqs=required")
    c = redis.Redis.from_url(url, socket_timeout=30)
    assert c.ping()
    assert c.execute_command("QPUSH", q, "over tls") == 1
    job = as_map(c.execute_command("QCLAIM", q, "w")[0])
    assert job[b"payload"] == b"over tls"
    assert c.execute_command("QACK", q, job[b"lease"]) == 1
    assert tls_daemon.client().execute_command("QLEN", q) == 0       # the plain port sees the same queues
    c.close()


def test_redis_cli_tls_ping_and_qpush(tls_daemon, pki):
    q = unique()
    cli = ["redis-cli", "-h", HOST, "-p", str(tls_daemon.tls_port), "--tls", "--cert", pki.client_cert,
           "--key", pki.client_key, "--cacert", pki.ca]
    ping = subprocess.run(cli + ["PING"], capture_output=True, text=True, timeout=30)
    assert ping.stdout == "PONG\n", ping
    push = subprocess.run(cli + ["QPUSH", q, "hello"], capture_output=True, text=True, timeout=30)
    assert push.stdout == "1\n", push
    assert tls_daemon.client().execute_command("QLEN", q) == 1


def test_info_client_list_and_config_over_tls(tls_daemon, pki):
    c = over_tls(tls_daemon, pki)
    server = c.info("server")
    assert (server["tls_port"], server["tcp_port"]) == (tls_daemon.tls_port, tls_daemon.port)
    assert "tls_handshake_failures" in stats(c)
    me = c.client_list(_type=None)
    mine = [entry for entry in me if entry["laddr"] == f"{HOST}:{tls_daemon.tls_port}"]
    assert len(mine) == 1 and int(mine[0]["fd"]) > 0      # the socket under the TLS transport was found
    assert c.config_get("tls-*") == {
        "tls-port": str(tls_daemon.tls_port), "tls-bind": "", "tls-cert-file": pki.server_cert,
        "tls-key-file": pki.server_key, "tls-ca-cert-file": pki.ca, "tls-auth-clients": "yes",
        "tls-protocols": "TLSv1.2 TLSv1.3"}
    with pytest.raises(redis.ResponseError, match="can't set immutable config"):
        c.config_set("tls-port", "0")
    c.close()


def test_pipelines_large_payloads_and_blocking_claims_over_tls(tls_daemon, pki):
    q = unique()
    c = over_tls(tls_daemon, pki)
    pipe = c.pipeline(transaction=False)
    for i in range(500):
        pipe.execute_command("QPUSH", q, f"job-{i}")
    assert pipe.execute() == list(range(1, 501))
    big = bytes(range(256)) * 16384                       # 4 MiB: many TLS records each way
    jid = c.execute_command("QPUSH", q, big)
    assert as_map(c.execute_command("QGET", q, jid))[b"payload"] == big
    # a claim parked on a TLS connection is served by a push on the plain port
    empty = unique()
    plain = tls_daemon.client()
    plain.execute_command("QCREATE", empty)             # so QINFO below never races the claim's auto-create
    got = []
    waiter = CheckedThread(target=lambda: got.append(c.execute_command("QCLAIM", empty, "w", "BLOCK", 10_000)))
    waiter.start()
    wait_for(lambda: as_map(plain.execute_command("QINFO", empty))[b"consumers_blocked"] == 1, 5, "claim parked")
    plain.execute_command("QPUSH", empty, "wake")
    waiter.join(15)
    assert waiter.failure is None and as_map(got[0][0])[b"payload"] == b"wake"
    c.close()


def test_qwork_streams_jobs_over_tls(tls_daemon, pki):
    q = unique()
    plain = tls_daemon.client()
    pushed = plain.execute_command("QPUSHMANY", q, 3, "a", "b", "c")
    w = over_tls(tls_daemon, pki, protocol=3)
    conn = w.connection_pool.get_connection()
    conn.send_command("QWORK", q, "stream", "MAX", 2)
    frames = []
    for _ in range(20):
        frames.append(conn.read_response(push_request=True))
        if len([f for f in frames if isinstance(f, list) and f[:1] == [b"job"]]) == 2:
            break
    jobs = [f for f in frames if isinstance(f, list) and f[:1] == [b"job"]]
    assert [f[2][b"id"] for f in jobs] == pushed[:2]
    assert as_map(plain.execute_command("QINFO", q))[b"in_flight"] == 2
    conn.disconnect()
    wait_for(lambda: as_map(plain.execute_command("QINFO", q))[b"in_flight"] == 0, 5, "QWORK leases released")
    w.close()


# -- refused handshakes, with a TLS client served meanwhile ------------------------------------------

def plain_text_on_tls_port(port: int) -> bytes:
    """What a client speaking plain RESP gets from the TLS port (bounded)."""
    with socket.create_connection((HOST, port), timeout=10) as s:
        s.sendall(b"PING\r\n")
        got = b""
        while chunk := s.recv(4096):
            got += chunk
            if len(got) > 65536:
                break
        return got


def test_plain_text_on_the_tls_port_fails_its_handshake_while_a_tls_client_is_served(tls_daemon, pki):
    q = unique()
    before = len(handshake_lines(tls_daemon))
    plain = tls_daemon.client()
    failures = stats(plain)["tls_handshake_failures"]
    c = over_tls(tls_daemon, pki)
    assert c.execute_command("QPUSH", q, "first") == 1
    got = []
    waiter = CheckedThread(target=lambda: got.append(c.execute_command("QCLAIM", q, "w", "BLOCK", 10_000)))
    c.execute_command("QCLAIM", q, "w")                 # TLS clients hold a job and wait for the next
    waiter.start()
    wait_for(lambda: as_map(plain.execute_command("QINFO", q))[b"consumers_blocked"] == 1, 5, "claim parked")
    answer = plain_text_on_tls_port(tls_daemon.tls_port)
    assert b"PONG" not in answer                         # no RESP on the TLS port; the socket just closes
    plain_redis = redis.Redis(host=HOST, port=tls_daemon.tls_port, socket_timeout=10, retry=Retry(NoBackoff(), 0))
    with pytest.raises(redis.ConnectionError):
        plain_redis.ping()
    plain.execute_command("QPUSH", q, "second")
    waiter.join(15)
    assert waiter.failure is None
    assert [as_map(j)[b"payload"] for j in got[0]] == [b"second"]
    assert as_map(c.execute_command("QINFO", q))[b"in_flight"] == 2 and c.ping()     # still served
    wait_for(lambda: len(handshake_lines(tls_daemon)) == before + 2, 5, "two handshake failures logged")
    assert stats(c)["tls_handshake_failures"] == failures + 2
    assert all(line.endswith("failed: wrong version number") for line in handshake_lines(tls_daemon)[before:])
    assert "Traceback" not in tls_daemon.log()
    c.close()


def test_a_client_without_a_certificate_is_refused_at_the_handshake(tls_daemon, pki):
    q = unique()
    failures = stats(tls_daemon.client())["tls_handshake_failures"]
    c = over_tls(tls_daemon, pki)
    c.execute_command("MULTI")                             # mid-transaction while the others are refused
    assert c.execute_command("QPUSH", q, "in multi") == b"QUEUED"
    for cert in (None, "stranger"):
        with pytest.raises(redis.ConnectionError):
            over_tls(tls_daemon, pki, cert=cert).ping()
    assert c.execute_command("EXEC") == [1]
    wait_for(lambda: stats(c)["tls_handshake_failures"] == failures + 2, 5, "two refused handshakes counted")
    log = "\n".join(handshake_lines(tls_daemon))
    assert "failed: peer did not return a certificate" in log
    assert "failed: certificate verify failed: unable to get local issuer certificate" in log
    assert "Traceback" not in tls_daemon.log()
    c.close()


def test_optional_client_certificates_let_clients_without_one_in(optional_daemon, pki):
    c = over_tls(optional_daemon, pki, cert=None)
    assert c.ping()
    assert over_tls(optional_daemon, pki).ping()           # with one, it is checked and fine
    with pytest.raises(redis.ConnectionError):
        over_tls(optional_daemon, pki, cert="stranger").ping()   # presented, so it must be valid
    assert c.execute_command("QPUSH", unique(), "x") == 1
    c.close()


def test_tls_protocols_refuses_an_older_version(optional_daemon, pki):
    served = over_tls(optional_daemon, pki, cert=None)
    assert served.ping()
    context = ssl.create_default_context(cafile=pki.ca)
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    with socket.create_connection((HOST, optional_daemon.tls_port), timeout=10) as raw:
        with pytest.raises(ssl.SSLError):
            context.wrap_socket(raw, server_hostname=HOST)
    assert served.ping()
    wait_for(lambda: any("unsupported protocol" in line for line in handshake_lines(optional_daemon)), 5,
             "the version refusal logged")
    served.close()


def test_many_refused_handshakes_at_once_leave_the_daemon_serving(tls_daemon, pki):
    c = over_tls(tls_daemon, pki)
    failures = stats(c)["tls_handshake_failures"]
    threads = [threading.Thread(target=plain_text_on_tls_port, args=(tls_daemon.tls_port,)) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert c.ping()
    wait_for(lambda: stats(c)["tls_handshake_failures"] == failures + 20, 5, "20 failures counted")
    c.close()


# -- start-up ------------------------------------------------------------------------------------------

def refused_start(tmp_path, env: dict) -> str:
    """Run ``leaseq serve`` with ``env``; it must exit 1 before listening.
    Its stderr."""
    port = free_port()
    proc = subprocess.run(LEASEQ + ["serve", "--port", str(port), "--dir", str(tmp_path / "data")],
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1, proc
    assert "listening" not in proc.stderr
    return proc.stderr


def test_the_daemon_refuses_to_start_on_unusable_tls_files(tmp_path, pki):
    port = str(free_port())
    missing = str(tmp_path / "missing.crt")
    no_cert = refused_start(tmp_path, {"LEASEQ_TLS_PORT": port})
    assert no_cert.strip().endswith(f"Error: 'tls-port' is {port} but 'tls-cert-file' is not set")
    unreadable = refused_start(tmp_path, tls_env(pki, int(port), LEASEQ_TLS_CERT_FILE=missing))
    assert unreadable.strip().endswith(f"'tls-cert-file' {missing} cannot be read: No such file or directory")
    mismatch = refused_start(tmp_path, tls_env(pki, int(port), LEASEQ_TLS_KEY_FILE=pki.client_key))
    assert mismatch.strip().endswith(
        f"'tls-key-file' {pki.client_key} is not the private key of 'tls-cert-file' {pki.server_cert}")
    no_ca = refused_start(tmp_path, tls_env(pki, int(port), LEASEQ_TLS_CA_CERT_FILE=""))
    assert "'tls-auth-clients' is yes but 'tls-ca-cert-file' is not set" in no_ca
