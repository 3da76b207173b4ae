"""Failover by Redis's own Sentinel, unmodified (``redis-server --sentinel``,
Debian's package; bin/test installs it): a Sentinel watches a leaseq
primary and its replica, the primary is killed with SIGKILL, Sentinel
promotes the replica (SLAVEOF NO ONE in its MULTI/EXEC), redis-py's
``Sentinel`` finds the new primary, the old primary's lease tokens work
there, a ``leaseq.client`` Worker on a ``sentinel://`` URL acks there the
job it finished across the failover, and the old primary, started again, is turned into a replica of
the new one by Sentinel itself (docs/replication.md)."""

from __future__ import annotations

import asyncio
import threading

import redis
import redis.sentinel
from harness import CheckedThread, Daemon, claim_one, qinfo, wait_for
from leaseq.bench.failover import SERVICE, Sentinel, monitor_conf
from leaseq.client import Queue, Worker, aio

NAME = SERVICE


def qacked(c) -> int:
    return qinfo(c, "work")[b"acked"]


async def _aio_push(url: str) -> int:
    async with aio.Queue(url, "work") as queue:
        return await queue.push(b"d")


def test_sentinel_fails_leaseq_over_and_turns_the_old_primary_into_a_replica(tmp_path):
    primary = Daemon(tmp_path / "primary").start()
    replica = Daemon(tmp_path / "replica", "--replicaof", f"127.0.0.1 {primary.port}").start()
    sentinel = None
    try:
        p = primary.client()
        wait_for(lambda: replica.client().info("replication")["master_link_status"] == "up", timeout=20,
                 what="the replica's link")
        sentinel = Sentinel(str(tmp_path / "sentinel"), monitor_conf(primary.port))
        wait_for(lambda: "+slave slave 127.0.0.1:%d" % replica.port in sentinel.events(), timeout=30,
                 what="Sentinel to find the replica in the primary's INFO")
        ids = [p.execute_command("QPUSH", "jobs", f"job {i}") for i in range(10)]
        held = claim_one(p, "jobs", "w1", "LEASE", "600000")
        # a Worker on a sentinel:// URL, one of whose jobs is still running when the primary dies
        url = f"sentinel://127.0.0.1:{sentinel.port}/{NAME}?socket_timeout=5"
        work, handled, release = Queue(url, "work"), [], threading.Event()

        def handler(job):
            handled.append(job.payload)
            if job.payload == b"slow":
                release.wait(60)
            return b"done " + job.payload

        worker = Worker(work, handler, concurrency=2, lease_ms=30_000, block_ms=200)
        slow = [work.push(payload) for payload in (b"a", b"slow", b"b")][1]
        working = CheckedThread(target=lambda: stats.append(worker.run()))
        stats: list = []
        working.start()
        wait_for(lambda: handled == [b"a", b"slow", b"b"] or sorted(handled) == [b"a", b"b", b"slow"],
                 timeout=20, what="the worker to take the three jobs")
        wait_for(lambda: p.execute_command("QLEN", "work") == 0 and qacked(p) == 2, timeout=20,
                 what="the two quick jobs acked")
        wait_for(lambda: replica.client().info("replication")["slave_repl_offset"]
                 == p.info("replication")["master_repl_offset"], timeout=20, what="the replica to catch up")

        primary.kill()
        release.set()                                     # its ack meets the dead primary, then the promoted one
        wait_for(lambda: sentinel.primary() == ("127.0.0.1", replica.port), timeout=60,
                 what="Sentinel to promote the replica")
        wait_for(lambda: "+switch-master" in sentinel.events(), timeout=30, what="the failover to end")

        found = redis.sentinel.Sentinel([("127.0.0.1", sentinel.port)], socket_timeout=10).master_for(NAME)
        assert found.execute_command("ROLE")[0] == b"master"
        assert found.execute_command("QACK", "jobs", held[b"lease"]) == 1        # a token of the old primary
        assert found.execute_command("QLEN", "jobs") == len(ids) - 1
        assert found.execute_command("QPUSH", "jobs", "after") > max(ids)

        wait_for(lambda: qacked(found) == 3, timeout=30, what="the slow job's ack to land on the new primary")
        assert found.execute_command("QRESULT", "work", slow) == b"done slow"
        work.push(b"c")                                   # the queue's next connection finds the new primary
        assert asyncio.run(_aio_push(url)) > 0            # and so does the asyncio flavour's
        wait_for(lambda: qacked(found) == 5, timeout=30, what="the worker to work on after the failover")
        worker.stop()
        working.join(30)
        assert stats[0].acked == 5 and stats[0].lost == 0 and stats[0].failed == 0
        assert sorted(handled) == [b"a", b"b", b"c", b"d", b"slow"]       # each job once
        work.close()

        primary.restart()                                 # as a primary, with its own history: Sentinel demotes it
        wait_for(lambda: primary.client().execute_command("ROLE")[:3] == [b"slave", b"127.0.0.1", replica.port],
                 timeout=60, what="Sentinel to turn the old primary into a replica")
        wait_for(lambda: primary.client().execute_command("QLEN", "jobs") == len(ids), timeout=20,
                 what="the old primary to hold the new primary's jobs")
        wait_for(lambda: "+convert-to-slave" in sentinel.events(), timeout=10, what="Sentinel's own word for it")
    finally:
        if sentinel is not None:
            sentinel.stop()
        replica.kill()
        primary.kill()
