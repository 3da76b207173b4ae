"""The HTTP listener (docs/operations.md, "Probes and metrics"): /healthz,
/readyz and /metrics on the daemon's loop; wrong paths, methods and
requests get HTTP's own answers, and the RESP port keeps serving."""

from __future__ import annotations

import os
import socket

import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness import Daemon, RespSocket, as_map, wait_for
from harness_http import http_daemon, http_get


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    d = http_daemon(tmp_path_factory.mktemp("http") / "data", env={"LEASEQ_ENABLE_DEBUG_COMMAND": "yes"})
    yield d
    d.stop()


def samples(text: str) -> dict:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_healthz_and_readyz(web):
    assert http_get(web, "/healthz")[::2] == (200, "ok\n")
    assert http_get(web, "/readyz")[::2] == (200, "ready\n")


def test_readyz_is_503_while_the_log_cannot_be_written(web):
    c = web.client()
    c.execute_command("DEBUG", "FAULT", "WRITE", "ENOSPC")
    try:
        with pytest.raises(Exception):
            c.execute_command("QPUSH", "faulty", "x")
        status, _t, body = http_get(web, "/readyz")
        assert (status, body) == (503, "the log cannot be written: No space left on device\n")
        assert http_get(web, "/healthz")[0] == 200                      # the process still serves
    finally:
        c.execute_command("DEBUG", "FAULT", "WRITE", "NONE")
    wait_for(lambda: http_get(web, "/readyz")[0] == 200, 10, "writes to resume")


def test_metrics_show_queues_commands_fsyncs_and_clients(web):
    c = web.client()
    c.execute_command("QPUSHMANY", "m", 3, "a", "b", "c")
    lease = c.execute_command("QCLAIM", "m", "w", "COUNT", 2)
    tokens = [as_map(j)[b"lease"] for j in lease]
    c.execute_command("QACK", "m", tokens[0])
    c.execute_command("QNACK", "m", tokens[1], "DELAY", 60_000)
    status, ctype, text = http_get(web, "/metrics")
    assert status == 200 and ctype.startswith("text/plain; version=")      # Prometheus' text format
    m = samples(text)
    jobs = {state: m[("leaseq_queue_jobs", (("queue", "m"), ("state", state)))]
            for state in ("ready", "delayed", "in_flight", "dead", "completed")}
    assert jobs == {"ready": 1, "delayed": 1, "in_flight": 0, "dead": 0, "completed": 0}
    assert m[("leaseq_queue_pushed_total", (("queue", "m"),))] == 3
    assert m[("leaseq_queue_acked_total", (("queue", "m"),))] == 1
    assert m[("leaseq_queue_nacked_total", (("queue", "m"),))] == 1
    assert ("leaseq_queue_dead_lettered_total", (("queue", "m"),)) in m
    assert ("leaseq_queue_lease_expired_total", (("queue", "m"),)) in m
    assert m[("leaseq_command_duration_seconds_count", (("command", "qpushmany"),))] >= 1
    assert m[("leaseq_command_duration_seconds_bucket", (("command", "qack"), ("le", "+Inf")))] >= 1
    assert m[("leaseq_wal_fsync_duration_seconds_count", ())] >= 1
    assert 0 < m[("leaseq_wal_bytes", ())] == c.info("persistence")["wal_bytes"]     # records, not the room after them
    assert m[("leaseq_wal_bytes", ())] < sum(os.path.getsize(os.path.join(web.data_dir, n))
                                             for n in os.listdir(web.data_dir) if n.endswith(".wal"))
    assert m[("leaseq_connected_clients", ())] >= 1


@pytest.mark.parametrize("request_bytes, status", [
    (b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", b"HTTP/1.1 404 Not Found"),
    (b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", b"HTTP/1.1 405 Method Not Allowed"),
    (b"hello\r\n\r\n", b"HTTP/1.1 400 Bad Request"),
    (b"GET / HTTP/1.1\r\n" + b"X-Long: " + b"a" * 70_000 + b"\r\n\r\n", b"HTTP/1.1 400 Bad Request"),
])
def test_bad_requests_get_http_answers_and_the_daemon_keeps_serving(web, request_bytes, status):
    with socket.create_connection(("127.0.0.1", web.http), timeout=5) as s:
        s.sendall(request_bytes)
        got = s.recv(4096)
    assert got.startswith(status), got
    assert web.client().ping()


def test_no_http_listener_by_default(tmp_path):
    d = Daemon(str(tmp_path / "data")).start()
    try:
        assert d.client().config_get("http-port") == {"http-port": "0"}
        assert "HTTP listener" not in d.log()
    finally:
        d.stop()


def test_metrics_show_throttled_jobs_by_the_rule_that_holds_them(web):
    c = web.client()
    c.execute_command("QCREATE", "capped", "CONCURRENCY", 1)
    c.execute_command("QPUSHMANY", "capped", 3, "a", "b", "c")
    assert len(c.execute_command("QCLAIM", "capped", "w", "COUNT", 3)) == 1
    c.execute_command("QCREATE", "held", "RATE", 5, 60_000)
    c.execute_command("QPUSH", "held", "x")
    c.execute_command("QPAUSE", "held")
    c.execute_command("QPUSH", "free", "x")
    m = samples(http_get(web, "/metrics")[2])
    throttled = {(q, reason): m[("leaseq_queue_throttled", (("queue", q), ("reason", reason)))]
                 for q in ("capped", "held", "free") for reason in ("pause", "concurrency", "rate")}
    assert throttled == {("capped", "pause"): 0, ("capped", "concurrency"): 2, ("capped", "rate"): 0,
                         ("held", "pause"): 1, ("held", "concurrency"): 0, ("held", "rate"): 0,
                         ("free", "pause"): 0, ("free", "concurrency"): 0, ("free", "rate"): 0}
    lines = RespSocket(web.port)
    lines.send("INFO", "queues")
    info = lines.read().decode().split("\r\n")
    lines.sock.close()
    assert "capped:ready=2,delayed=0,in_flight=1,dead=0,completed=0,waiting=0,cancelled=0,durability=fsync,paused=0,throttled=2" in info
    assert "held:ready=1,delayed=0,in_flight=0,dead=0,completed=0,waiting=0,cancelled=0,durability=fsync,paused=1,throttled=1" in info
    assert "free:ready=1,delayed=0,in_flight=0,dead=0,completed=0,waiting=0,cancelled=0,durability=fsync" in info
