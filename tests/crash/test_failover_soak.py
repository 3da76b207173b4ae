"""The failover soak (bench/failover.py; ``leaseq bench failover`` runs it
longer): a primary, its replica and three Redis Sentinels under a producer,
two workers and an EVERY schedule, the primary killed with SIGKILL each
cycle and started again as a replica of the new one.

With ``min-replicas-to-ack 1`` an answer means the record is on both
disks: no acknowledged push is lost, no acked job comes back, no tick
fires twice or goes missing.  Asynchronous (0), what is lost is counted
and stays within what was answered in the second before each kill."""

from __future__ import annotations

from leaseq.bench import failover


def test_acknowledged_means_on_two_machines_across_kill_9_failovers(tmp_path):
    r = failover.soak(str(tmp_path), cycles=3, ack=1, run_s=1.0)
    print(f"\nfailover soak, min-replicas-to-ack 1: {r}")
    assert r["cycles"] == 3 and r["pushes"] > 300 and r["acked"] > 300
    assert r["lost"] == 0 and r["acked_back"] == 0
    assert r["ticks"] > 20 and r["ticks_twice"] == 0 and r["ticks_missing"] == 0
    assert all(0 < s < 60 for s in r["failover_s"])


def test_asynchronous_replication_loses_at_most_the_last_moment_before_a_kill(tmp_path):
    r = failover.soak(str(tmp_path), cycles=2, ack=0, run_s=1.0)
    print(f"\nfailover soak, asynchronous: {r}")
    assert r["cycles"] == 2 and r["pushes"] > 200
    assert r["lost"] <= r["at_risk"]
    assert r["ticks_twice"] == 0 and r["ticks_missing"] == 0
