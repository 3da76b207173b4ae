"""``leaseq switchover`` (cli/switchover.py): a planned handover of the
primary's role, with Redis's own Sentinel (``redis-server --sentinel``,
unmodified). The primary pauses its writes, waits for its replica, asks the
sentinels to fail over, follows the new primary and lets the writes that
waited go there: nothing answered is lost, nothing runs twice. And each way
it can refuse, leaving the node the primary with its writes going on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import redis
import redis.sentinel
from harness import CheckedThread, Daemon, as_map, free_port, start_pair, wait_for
from leaseq.bench.failover import SERVICE, Sentinel, monitor_conf

# a failover these tests see is the switchover's: the sentinels would take a minute to call a node down
QUIET = dict(down_after_ms=60_000, failover_timeout_ms=60_000)


def switchover(node: Daemon, sentinel_ports: list[int], *args: str, timeout: float = 60) -> subprocess.Popen:
    sentinels = ",".join(f"127.0.0.1:{p}" for p in sentinel_ports)
    return subprocess.Popen([sys.executable, "-m", "leaseq.cli", "switchover", "--port", str(node.port),
                             "--sentinels", sentinels, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def finished(proc: subprocess.Popen, timeout: float = 60) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def role(d: Daemon) -> list:
    return d.client().execute_command("ROLE")


def sentinel_for(tmp_path, primary: Daemon, replica: Daemon, name: str = "sentinel") -> Sentinel:
    sentinel = Sentinel(str(tmp_path / name), monitor_conf(primary.port, **QUIET))
    wait_for(lambda: replica.port in sentinel.healthy_replicas(), timeout=30,
             what="the sentinel to find the replica in the primary's INFO")
    return sentinel


class Pusher:
    """Pushes numbered jobs through redis-py's Sentinel client, one at a
    time, retrying what an error answered (bounded in count and time);
    keeps each answered id."""

    def __init__(self, sentinel_port: int) -> None:
        manager = redis.sentinel.Sentinel([("127.0.0.1", sentinel_port)], socket_timeout=30)
        self.client = manager.master_for(SERVICE, socket_timeout=30)
        self.answered: list[int] = []
        self.errors: list[str] = []
        self.stopping = False
        self.thread = CheckedThread(target=self._run)

    def _run(self) -> None:
        deadline = time.monotonic() + 60
        n = 0
        while not self.stopping and n < 20_000 and time.monotonic() < deadline:
            try:
                self.answered.append(self.client.execute_command("QPUSH", "live", f"job {n}"))
                n += 1
            except (redis.ConnectionError, redis.ReadOnlyError, redis.TimeoutError) as e:
                self.errors.append(f"{type(e).__name__}: {e}")
                time.sleep(0.02)

    def stop(self) -> None:
        self.stopping = True
        self.thread.join(60)
        assert self.thread.failure is None, self.thread.failure
        self.client.close()


def test_a_switchover_hands_the_role_to_a_lagging_replica_and_loses_nothing(tmp_path):
    primary, replica = start_pair(tmp_path, "--min-replicas-to-ack", "0")
    sentinel = pusher = None
    try:
        sentinel = sentinel_for(tmp_path, primary, replica)
        p = primary.client()
        os.kill(replica.proc.pid, signal.SIGSTOP)          # it lags: answered pushes it does not have
        try:
            ids = [p.execute_command("QPUSH", "jobs", f"before {i}") for i in range(20)]
            pusher = Pusher(sentinel.port)
            pusher.thread.start()
            wait_for(lambda: len(pusher.answered) >= 10, timeout=20, what="the pusher to push")
            started = time.monotonic()
            proc = switchover(primary, [sentinel.port], "--timeout", "30")
            time.sleep(1.0)                                # held there: the replica cannot acknowledge yet
            assert proc.poll() is None and role(primary)[0] == b"master"
        finally:
            os.kill(replica.proc.pid, signal.SIGCONT)
        rc, out, err = finished(proc)
        took = time.monotonic() - started
        assert rc == 0, (out, err)
        assert "with 1 replica; pausing its writes" in out and "1 of 1 replicas have everything" in out, out
        assert f"the sentinels name 127.0.0.1:{replica.port} the primary" in out, out
        assert "done in" in out, out

        assert sentinel.primary() == ("127.0.0.1", replica.port)
        assert role(replica)[0] == b"master"
        assert role(primary)[:3] == [b"slave", b"127.0.0.1", replica.port]    # it followed at once
        count = len(pusher.answered)
        wait_for(lambda: len(pusher.answered) > count + 10, timeout=30,
                 what="the pusher to go on at the new primary")
        pusher.stop()
        # the push held during the switchover was refused on the old primary (redis-py's Sentinel client
        # turns -READONLY into a lost connection) and pushed again at the new one: once
        assert any("READONLY" in e or "now a slave" in e or "Connection" in e for e in pusher.errors), pusher.errors
        r = replica.client()
        assert [r.execute_command("QGET", "jobs", i) is not None for i in ids] == [True] * len(ids)
        assert r.execute_command("QLEN", "jobs") == len(ids)
        assert r.execute_command("QLEN", "live") == len(pusher.answered) == len(set(pusher.answered))
        assert all(r.execute_command("QGET", "live", i) is not None for i in pusher.answered)
        # and the old primary, now a replica, holds the same
        wait_for(lambda: p.execute_command("QLEN", "live") == len(pusher.answered), timeout=20,
                 what="the old primary to follow the new one")
        assert p.execute_command("QLEN", "jobs") == len(ids)
        assert took < 30
    finally:
        if pusher is not None and not pusher.stopping:
            pusher.stopping = True
        if sentinel is not None:
            sentinel.stop()
        replica.kill()
        primary.kill()


def test_a_switchover_refuses_and_writes_go_on(tmp_path):
    # the replica can never be promoted (replica-priority 0): the sentinels refuse the failover
    primary = Daemon(tmp_path / "primary").start()
    replica = Daemon(tmp_path / "replica", "--replicaof", f"127.0.0.1 {primary.port}",
                     "--replica-priority", "0").start()
    solo = Daemon(tmp_path / "solo").start()
    sentinel = None
    try:
        ghost = free_port()                       # a primary the sentinel never reaches: it never learns its run_id
        sentinel = Sentinel(str(tmp_path / "sentinel"), monitor_conf(primary.port, **QUIET)
                            + f"sentinel monitor solo 127.0.0.1 {solo.port} 1\n"
                            + f"sentinel monitor ghost 127.0.0.1 {ghost} 1\n")
        wait_for(lambda: replica.port in {int(as_map(e)[b"port"]) for e in
                                          sentinel.client.execute_command("SENTINEL", "REPLICAS", SERVICE)},
                 timeout=30, what="the sentinel to find the replica")
        p = primary.client()

        def pushes_at_once(c=p) -> None:
            t = time.monotonic()
            assert c.execute_command("QPUSH", "q", "x") > 0
            assert time.monotonic() - t < 2

        # on a replica there is nothing to do, and it says so
        rc, out, err = finished(switchover(replica, [sentinel.port]))
        assert rc == 0 and f"this node is a slave (of 127.0.0.1:{primary.port}): nothing to hand over" in out, \
            (out, err)
        # the sentinels' primary of the service is another node
        rc, out, err = finished(switchover(solo, [sentinel.port]))
        assert rc == 1 and f"the sentinels' primary of 'leaseq' is 127.0.0.1:{primary.port}" in err, err
        assert "not this node" in err
        # the sentinel does not know its primary's run_id, and the address it names is not this node's
        rc, out, err = finished(switchover(solo, [sentinel.port], "--service", "ghost", "--timeout", "0.5"))
        assert rc == 1 and f"names 127.0.0.1:{ghost} the primary of 'ghost' but does not know its run_id yet, " \
            f"and this node goes by 127.0.0.1:{solo.port}" in err, err
        # a primary without a replica
        rc, out, err = finished(switchover(solo, [sentinel.port], "--service", "solo"))
        assert rc == 1 and "this node has no replica to hand over to" in err, err
        pushes_at_once(solo.client())
        # a replica the sentinel cannot reach where it says it listens: none it would promote
        hidden = Daemon(tmp_path / "hidden", "--replicaof", f"127.0.0.1 {solo.port}",
                        "--replica-announce-port", str(free_port())).start()
        try:
            wait_for(lambda: solo.client().info("replication")["connected_slaves"] == 1, timeout=20,
                     what="the hidden replica's link")
            rc, out, err = finished(switchover(solo, [sentinel.port], "--service", "solo", "--timeout", "1"))
            assert rc == 1 and f"sentinel 127.0.0.1:{sentinel.port} sees no replica up and linked to hand over " \
                "to (replicas: " in err, err
            pushes_at_once(solo.client())
        finally:
            hidden.kill()
        # no sentinel answers: one on a port nobody listens on, then one that does not know the service
        rc, out, err = finished(switchover(primary, [free_port()]))
        assert rc == 1 and "no sentinel answered for 'leaseq'" in err, err
        rc, out, err = finished(switchover(primary, [sentinel.port], "--service", "nope"))
        assert rc == 1 and "no sentinel answered for 'nope'" in err and "No such master" in err, err
        # the sentinels refuse: no replica they may promote; the pause ended with the command
        rc, out, err = finished(switchover(primary, [sentinel.port]))
        assert rc == 1 and "NOGOODSLAVE" in err and "writes go on here" in err, (out, err)
        assert "1 of 1 replicas have everything" in out
        pushes_at_once()
        assert role(primary)[0] == b"master"
        # the replica does not acknowledge in time
        os.kill(replica.proc.pid, signal.SIGSTOP)
        try:
            p.execute_command("QPUSH", "q", "unacknowledged")
            t = time.monotonic()
            rc, out, err = finished(switchover(primary, [sentinel.port], "--timeout", "1"))
            assert rc == 1 and "no replica acknowledged offset" in err and "writes go on here" in err, err
            assert time.monotonic() - t < 10
            pushes_at_once()
        finally:
            os.kill(replica.proc.pid, signal.SIGCONT)
        # what the command line refuses before it connects
        done = subprocess.run([sys.executable, "-m", "leaseq.cli", "switchover", "--sentinels", "host:port"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and "not host:port: 'host:port'" in done.stderr, done.stderr
        assert role(primary)[0] == b"master" and sentinel.primary() == ("127.0.0.1", primary.port)
    finally:
        if sentinel is not None:
            sentinel.stop()
        for d in (solo, replica, primary):
            d.kill()


def test_a_failover_slower_than_the_timeout_is_reported(tmp_path):
    """The sentinels promote a replica about a second after SENTINEL
    FAILOVER: a switchover given half a second says it did not see it
    finish, and that the sentinels may still demote the node."""
    primary, replica = start_pair(tmp_path)
    sentinel = None
    try:
        sentinel = sentinel_for(tmp_path, primary, replica)
        rc, out, err = finished(switchover(primary, [sentinel.port], "--timeout", "0.5"))
        assert rc == 1, (out, err)
        assert "had not promoted a replica in time; this node may still be demoted by the sentinels" in err, err
        assert "asking sentinel" in out
        # the pause ended with the command: a write is answered (here, or refused once the sentinels demote it)
        try:
            primary.client(socket_timeout=5).execute_command("QPUSH", "q", "x")
        except redis.ReadOnlyError:
            pass
        wait_for(lambda: sentinel.primary() == ("127.0.0.1", replica.port), timeout=30,
                 what="the sentinels to finish the failover they started")
    finally:
        if sentinel is not None:
            sentinel.stop()
        replica.kill()
        primary.kill()
