"""FAILOVER, Redis 7's coordinated failover without Sentinel
(daemon/failover.py; docs/replication.md, "FAILOVER without Sentinel"):
writes wait until a replica has everything, the replica is promoted by a
PSYNC ... FAILOVER from its primary, the primary follows it, and the writes
that waited are refused with -READONLY, never run; TIMEOUT, FORCE and ABORT
as Redis has them, each refusal in Redis's words, and a target that
refuses the PSYNC (a scripted peer) leaves the node the primary."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import hiredis
import redis
from harness import CheckedThread, Daemon, RespSocket, error_text, free_port, wait_for


def role(d) -> list:
    return d.client().execute_command("ROLE")


def state(d) -> str:
    return d.client().info("replication")["master_failover_state"]


def held_push(d, queue: str = "q"):
    """A push from its own connection, in a thread: what it got (an id, or the error)."""
    got: list = []

    def push():
        try:
            got.append(d.client(socket_timeout=30).execute_command("QPUSH", queue, "held"))
        except redis.ResponseError as e:
            got.append(e)
    t = CheckedThread(target=push)
    t.start()
    return t, got


def test_failover_hands_the_role_to_a_lagging_replica_and_back(pair):
    primary, replica = pair
    p = primary.client()
    assert state(primary) == state(replica) == "no-failover"
    os.kill(replica.proc.pid, signal.SIGSTOP)          # it lags: answered pushes it does not have yet
    try:
        ids = [p.execute_command("QPUSH", "q", f"job {i}") for i in range(10)]
        assert p.execute_command("FAILOVER") == b"OK"
        assert state(primary) == "waiting-for-sync"
        assert error_text(p, "FAILOVER") == "FAILOVER already in progress."
        waiting, got = held_push(primary)
        wait_for(lambda: p.info("clients")["blocked_clients"] >= 1, timeout=10, what="the push to be held")
        assert p.execute_command("QLEN", "q") == 10               # reads are answered meanwhile
        assert p.execute_command("CLIENT", "UNPAUSE") == b"OK"      # (it ends a CLIENT PAUSE only)
        assert p.info("clients")["blocked_clients"] >= 1 and not got
    finally:
        os.kill(replica.proc.pid, signal.SIGCONT)
    waiting.join(30)
    assert waiting.failure is None
    assert isinstance(got[0], redis.ReadOnlyError), got        # refused, never run
    assert role(primary)[:3] == [b"slave", b"127.0.0.1", replica.port]
    assert role(replica)[0] == b"master"
    assert state(primary) == state(replica) == "no-failover"
    r = replica.client()
    assert r.execute_command("QLEN", "q") == 10 and all(r.execute_command("QGET", "q", i) for i in ids)
    assert "promoted by a failover request from" in replica.log()
    assert "Failover target 127.0.0.1:%d is synced, failing over." % replica.port in primary.log()
    assert "partial sync" in primary.log().split("FAILOVER requested")[-1]       # no full sync

    # and back, naming the target, the other way round
    after = r.execute_command("QPUSH", "q", "on the new primary")
    wait_for(lambda: p.execute_command("QLEN", "q") == 11, timeout=20, what="the old primary to follow")
    assert r.execute_command("FAILOVER", "TO", "127.0.0.1", primary.port, "TIMEOUT", 10_000) == b"OK"
    wait_for(lambda: role(primary)[0] == b"master" and role(replica)[0] == b"slave", timeout=20,
             what="the roles to swap back")
    assert p.execute_command("QGET", "q", after) is not None
    assert p.execute_command("QPUSH", "q", "back") > after


def test_failover_refusals_in_redis_words(pair):
    primary, replica = pair
    p, r = primary.client(), replica.client()
    assert error_text(p, "FAILOVER", "ABORT") == "No failover in progress."
    assert error_text(r, "FAILOVER") == "FAILOVER is not valid when server is a replica."
    assert error_text(p, "FAILOVER", "TO", "127.0.0.1", 1) == "FAILOVER target HOST and PORT is not a replica."
    assert error_text(p, "FAILOVER", "FORCE") == (
        "FAILOVER with force option requires both a timeout and target HOST and IP.")
    assert error_text(p, "FAILOVER", "TO", "127.0.0.1", replica.port, "FORCE") == (
        "FAILOVER with force option requires both a timeout and target HOST and IP.")
    assert error_text(p, "FAILOVER", "TIMEOUT", 0) == "FAILOVER timeout must be greater than 0"
    assert error_text(p, "FAILOVER", "TIMEOUT", "soon") == "value is not an integer or out of range"
    for bad in (("BOGUS",), ("ABORT", "FORCE"), ("TIMEOUT", 5, "TIMEOUT", 5), ("TO", "127.0.0.1")):
        assert error_text(p, "FAILOVER", *bad) == "syntax error", bad
    assert error_text(r, "PSYNC", "x" * 40, 1, "FAILOVER") == "PSYNC FAILOVER replid must match my replid."
    assert error_text(r, "PSYNC", "x" * 40, 1, "SOON") == "syntax error"
    assert state(primary) == "no-failover" and role(replica)[0] == b"slave"
    replica.kill()
    wait_for(lambda: p.info("replication")["connected_slaves"] == 0, timeout=10, what="the replica gone")
    assert error_text(p, "FAILOVER") == "FAILOVER requires connected replicas."


def test_a_timeout_aborts_and_force_goes_ahead(pair):
    primary, replica = pair
    p = primary.client()
    os.kill(replica.proc.pid, signal.SIGSTOP)
    try:
        p.execute_command("QPUSH", "q", "only here")
        # the replica never catches up: writes go on here after the timeout, the held push runs
        assert p.execute_command("FAILOVER", "TIMEOUT", 300) == b"OK"
        waiting, got = held_push(primary)
        waiting.join(30)
        assert got == [2] and state(primary) == "no-failover" and role(primary)[0] == b"master"
        assert "FAILOVER to any replica aborted: Replica never caught up before timeout" in primary.log()
        # ABORT while it waits: the same
        assert p.execute_command("FAILOVER", "TO", "127.0.0.1", replica.port) == b"OK"
        waiting, got = held_push(primary)
        wait_for(lambda: p.info("clients")["blocked_clients"] >= 1, timeout=10, what="the push to be held")
        assert p.execute_command("FAILOVER", "ABORT") == b"OK"
        waiting.join(30)
        assert got == [3] and state(primary) == "no-failover"
        assert "aborted: Failover manually aborted" in primary.log()
        # FORCE: past the timeout it fails over to the lagging replica all the same
        assert p.execute_command("FAILOVER", "TO", "127.0.0.1", replica.port, "FORCE", "TIMEOUT", 200) == b"OK"
        wait_for(lambda: state(primary) == "failover-in-progress", timeout=10, what="the forced failover")
        assert role(primary)[0] == b"slave"
    finally:
        os.kill(replica.proc.pid, signal.SIGCONT)
    wait_for(lambda: state(primary) == "no-failover" and role(replica)[0] == b"master", timeout=20,
             what="the forced failover to finish")
    assert "time out exceeded, failing over." in primary.log()
    wait_for(lambda: role(primary)[3] == b"connected", timeout=20, what="the old primary to follow")
    # the old primary holds the new one's history, whatever of its own pushes the replica read before
    # it was promoted (what was in its socket when it stopped): FORCE's price, as in Redis
    wait_for(lambda: replica.client().execute_command("QLEN", "q") == primary.client().execute_command("QLEN", "q"),
             timeout=20, what="both nodes to hold the same")


def test_abort_while_in_progress_makes_the_node_a_primary_again(pair):
    primary, replica = pair
    p = primary.client()
    os.kill(replica.proc.pid, signal.SIGSTOP)           # the PSYNC FAILOVER waits in its socket
    try:
        assert p.execute_command("FAILOVER", "TO", "127.0.0.1", replica.port, "FORCE", "TIMEOUT", 100) == b"OK"
        wait_for(lambda: state(primary) == "failover-in-progress", timeout=10, what="the forced failover")
        assert p.execute_command("FAILOVER", "ABORT") == b"OK"
        assert role(primary)[0] == b"master" and state(primary) == "no-failover"
        assert p.execute_command("QPUSH", "q", "here") == 1
    finally:
        os.kill(replica.proc.pid, signal.SIGCONT)


class ScriptedTarget:
    """A peer that links to a primary as its replica (REPLCONF, PSYNC ? -1,
    the snapshot, REPLCONF ACK of the whole stream), and listens where it
    says: when the primary fails over to it and asks ``PSYNC ... FAILOVER``,
    it refuses, as a node of another history would."""

    def __init__(self, primary_port: int) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.asked: list = []
        self.serving = CheckedThread(target=self._serve)
        self.serving.start()
        self.link = RespSocket(primary_port, timeout=10)
        self.link.send("REPLCONF", "listening-port", self.port)
        assert self.link.read() == b"OK"
        self.link.send("PSYNC", "?", -1)
        words = self._line().split()
        assert words[0] == b"+FULLRESYNC", words
        size = int(self._line()[1:])
        self._exactly(size)                               # the snapshot
        self.link.send("REPLCONF", "ACK", int(words[2]))

    def _line(self) -> bytes:
        data = b""
        while not data.endswith(b"\r\n"):
            data += self.link.sock.recv(1)
        return data[:-2]

    def _exactly(self, n: int) -> None:
        while n:
            n -= len(self.link.sock.recv(min(n, 65536)))

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        conn.settimeout(20)
        reader = hiredis.Reader()
        with conn:
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                reader.feed(data)
                while (command := reader.gets()) is not False:
                    self.asked.append(command)
                    if command[0].upper() == b"PING":
                        conn.sendall(b"+PONG\r\n")
                    elif command[0].upper() == b"PSYNC":
                        conn.sendall(b"-ERR PSYNC FAILOVER replid must match my replid.\r\n")
                    else:
                        conn.sendall(b"+OK\r\n")

    def close(self) -> None:
        self.link.close()
        self.listener.close()


def test_a_target_that_refuses_the_psync_leaves_the_node_the_primary(tmp_path):
    primary = Daemon(tmp_path / "primary").start()
    target = None
    try:
        p = primary.client()
        p.execute_command("QPUSH", "q", "kept")
        target = ScriptedTarget(primary.port)
        replid = p.info("replication")["master_replid"]
        wait_for(lambda: p.info("replication").get("slave0", {}).get("state") == "online", timeout=10,
                 what="the scripted replica online")
        offset = p.info("replication")["master_repl_offset"]
        assert p.execute_command("FAILOVER", "TO", "127.0.0.1", target.port) == b"OK"
        wait_for(lambda: any(c[0] == b"PSYNC" for c in target.asked), timeout=10, what="the PSYNC FAILOVER")
        psync = next(c for c in target.asked if c[0] == b"PSYNC")
        assert psync == [b"PSYNC", replid.encode(), str(offset + 1).encode(), b"FAILOVER"]
        wait_for(lambda: role(primary)[0] == b"master" and state(primary) == "no-failover", timeout=10,
                 what="the node to be a primary again")
        assert "aborted: Failover target rejected psync request" in primary.log()
        assert p.execute_command("QPUSH", "q", "after") > 1      # (a primary again, as after a promotion)
        assert p.execute_command("QLEN", "q") == 2
    finally:
        if target is not None:
            target.close()
        primary.kill()


def test_a_target_not_online_is_refused(tmp_path):
    """A replica still being sent its snapshot (a peer that reads nothing of
    a 40 MB one) is not a target, as in Redis."""
    primary = Daemon(tmp_path / "primary").start()
    link = None
    try:
        p = primary.client()
        payload = b"x" * 4096
        for _ in range(20):
            p.execute_command("QPUSHMANY", "big", 500, *([payload] * 500))
        port = free_port()
        link = RespSocket(primary.port, timeout=10)
        link.send("REPLCONF", "listening-port", port)
        assert link.read() == b"OK"
        link.send("PSYNC", "?", -1)                       # and never reads the snapshot
        wait_for(lambda: p.info("replication").get("slave0", {}).get("state") == "send_bulk", timeout=30,
                 what="the snapshot on its way")
        assert error_text(p, "FAILOVER", "TO", "127.0.0.1", port) == "FAILOVER target replica is not online."
    finally:
        if link is not None:
            link.close()
        primary.kill()


def switchover(node, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "leaseq.cli", "switchover", "--port", str(node.port), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(proc: subprocess.Popen) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


def test_leaseq_switchover_without_sentinel_runs_failover(pair, tmp_path):
    """``leaseq switchover --without-sentinel`` (cli/switchover.py): FAILOVER,
    then the wait for its end, for a pair no Sentinel watches."""
    primary, replica = pair
    p = primary.client()
    rc, out, err = finished(switchover(replica, "--without-sentinel"))
    assert rc == 0 and "nothing to hand over" in out, (out, err)
    os.kill(replica.proc.pid, signal.SIGSTOP)
    try:
        ids = [p.execute_command("QPUSH", "q", f"job {i}") for i in range(5)]
        rc, out, err = finished(switchover(primary, "--without-sentinel", "--timeout", "1"))
        assert rc == 1 and "FAILOVER was aborted (the node's log says why); writes go on here" in err, (out, err)
        ids.append(p.execute_command("QPUSH", "q", "after the abort"))
        proc = switchover(primary, "--without-sentinel", "--timeout", "30")
        wait_for(lambda: state(primary) == "waiting-for-sync", timeout=20, what="the FAILOVER")
    finally:
        os.kill(replica.proc.pid, signal.SIGCONT)
    rc, out, err = finished(proc)
    assert rc == 0, (out, err)
    assert "a primary with 1 replica: FAILOVER (writes wait)" in out
    assert f"this node follows 127.0.0.1:{replica.port}" in out
    r = replica.client()
    assert role(replica)[0] == b"master" and all(r.execute_command("QGET", "q", i) for i in ids)
    # refusals: neither way named, or both; a node with no replica
    for args in ((), ("--without-sentinel", "--sentinels", "127.0.0.1:1")):
        done = subprocess.run([sys.executable, "-m", "leaseq.cli", "switchover", *args], capture_output=True,
                              text=True, timeout=60, env={k: v for k, v in os.environ.items() if k != "SENTINELS"})
        assert done.returncode == 2 and "give --sentinels (or SENTINELS), or --without-sentinel" in done.stderr
    with Daemon(tmp_path / "solo") as solo:
        rc, out, err = finished(switchover(solo, "--without-sentinel"))
        assert rc == 1 and "this node has no replica to hand over to" in err


def test_leaseq_switchover_without_sentinel_refusals(pair):
    """A FAILOVER already running is the node's refusal; a target that took
    the PSYNC FAILOVER and never answered (stopped) leaves the failover in
    progress past the timeout: the command aborts it and says that the
    target may be a primary too."""
    primary, replica = pair
    p = primary.client()
    caught_up_now = p.execute_command("WAIT", 1, 10_000)
    assert caught_up_now == 1
    os.kill(replica.proc.pid, signal.SIGSTOP)
    try:
        p.execute_command("QPUSH", "q", "not there")            # so a FAILOVER waits
        assert p.execute_command("FAILOVER") == b"OK"
        rc, out, err = finished(switchover(primary, "--without-sentinel"))
        assert rc == 1 and "FAILOVER: FAILOVER already in progress." in err, err
        assert p.execute_command("FAILOVER", "ABORT") == b"OK"
    finally:
        os.kill(replica.proc.pid, signal.SIGCONT)
    assert p.execute_command("WAIT", 1, 10_000) == 1
    os.kill(replica.proc.pid, signal.SIGSTOP)                    # synced, then silent
    try:
        rc, out, err = finished(switchover(primary, "--without-sentinel", "--timeout", "1"))
        assert rc == 1 and "the replica did not take the role in time: FAILOVER aborted, this node is a primary " \
            "again (check ROLE on the replica)" in err, (out, err)
        assert role(primary)[0] == b"master" and state(primary) == "no-failover"
    finally:
        os.kill(replica.proc.pid, signal.SIGCONT)
