"""Replication between real daemons (docs/replication.md): a replica that
follows a primary holds the same jobs, ids, tokens and deliveries; refuses
writes with Redis's -READONLY; survives kill -9; a promoted replica takes
the old primary's tokens; a former primary told to follow continues with a
partial sync; INFO replication and ROLE as Redis writes them."""

from __future__ import annotations

import pathlib
import re
import subprocess
import threading
import time

import pytest
import redis
from harness import (DEBUG_ENV, LEASEQ, Daemon, as_map, bgsave, caught_up, claim_one, error_text, fsync_counts,
                     linked, start_pair, wait_for, writes_resume)

READONLY = "You can't write against a read only replica."    # (redis-py takes the READONLY code off)


def refused_as_readonly(c, *args) -> bool:
    with pytest.raises(redis.exceptions.ReadOnlyError) as e:
        c.execute_command(*args)
    return str(e.value) == READONLY


def jobs_of(c, q: str, ids) -> list:
    """What QGET shows of each job: the same on every node holding it."""
    out = []
    for jid in ids:
        reply = c.execute_command("QGET", q, jid)
        job = as_map(reply) if reply is not None else {}        # (an acked job is not kept)
        out.append({k: job[k] for k in (b"id", b"state", b"payload", b"deliveries", b"priority") if k in job})
    return out


def test_a_replica_holds_what_its_primary_wrote(pair):
    primary, replica = pair
    p, r = primary.client(), replica.client()
    ids = [p.execute_command("QPUSH", "rq", f"job {i}") for i in range(20)]
    p.execute_command("QPUSHMANY", "rq", 3, "a", "b", "c")
    claimed = [claim_one(p, "rq", "w1") for _ in range(5)]
    assert p.execute_command("QACK", "rq", claimed[0][b"lease"]) == 1
    p.execute_command("QNACK", "rq", claimed[1][b"lease"], "ERROR", "boom")
    caught_up(primary, replica)
    assert r.execute_command("QLEN", "rq") == p.execute_command("QLEN", "rq") == 20 + 3 - 5    # (the nacked job waits)
    assert jobs_of(r, "rq", ids) == jobs_of(p, "rq", ids)
    info = r.info("replication")
    assert info["role"] == "slave" and info["master_port"] == primary.port and info["slave_read_only"] == 1
    assert info["master_replid"] == p.info("replication")["master_replid"]


def test_a_replica_refuses_writes_claims_and_streams_with_readonly(pair):
    primary, replica = pair
    primary.client().execute_command("QPUSH", "ro", "x")
    caught_up(primary, replica)
    r = replica.client()
    for args in (("QPUSH", "ro", "y"), ("QCLAIM", "ro", "w"), ("QCLAIM", "ro", "w", "BLOCK", "100"),
                 ("QACK", "ro", "1.1.1"), ("QCREATE", "other"), ("QWORK", "ro", "w", "1"),
                 ("SUBSCRIBE", "QWORK ro w")):
        assert refused_as_readonly(r, *args), args
    assert r.execute_command("QLEN", "ro") == 1                  # reads are answered
    pipe = r.pipeline(transaction=True)                          # inside MULTI: refused, the EXEC aborts
    pipe.execute_command("QPUSH", "ro", "z")
    with pytest.raises(redis.exceptions.ResponseError):
        pipe.execute()


def test_info_replication_and_role_as_redis_writes_them(pair):
    primary, replica = pair
    primary.client().execute_command("QPUSH", "info", "x")
    caught_up(primary, replica)
    p, r = primary.client(), replica.client()
    wait_for(lambda: p.info("replication")["slave0"]["offset"] == p.info("replication")["master_repl_offset"],
             timeout=10, what="the replica's ACK")             # (REPLCONF ACK once a second)
    info = p.info("replication")
    assert info["role"] == "master" and info["connected_slaves"] == 1
    assert info["slave0"]["ip"] == "127.0.0.1" and info["slave0"]["port"] == replica.port
    assert info["slave0"]["state"] == "online"
    assert len(info["master_replid"]) == 40 and info["master_replid2"] == 0     # (40 zeros, read as a number)
    assert info["second_repl_offset"] == -1 and info["master_repl_offset"] > 0
    offset = info["master_repl_offset"]
    assert p.execute_command("ROLE") == [b"master", offset, [[b"127.0.0.1", str(replica.port).encode(),
                                                                str(offset).encode()]]]
    assert r.execute_command("ROLE") == [b"slave", b"127.0.0.1", primary.port, b"connected", offset]
    assert len(p.info("server")["run_id"]) == 40 and p.info("server")["run_id"] != r.info("server")["run_id"]


def test_a_killed_replica_restarts_and_catches_up(pair):
    primary, replica = pair
    p = primary.client()
    ids = [p.execute_command("QPUSH", "k9", f"{i}") for i in range(50)]
    caught_up(primary, replica)
    replica.kill()
    ids += [p.execute_command("QPUSH", "k9", f"more {i}") for i in range(50)]
    claim_one(p, "k9", "w")
    replica.restart()
    wait_for(lambda: linked(replica), timeout=20, what="the restarted replica's link")
    caught_up(primary, replica)
    assert jobs_of(replica.client(), "k9", ids) == jobs_of(p, "k9", ids)
    assert replica.log().count("full sync done") == 1        # the first; after the kill it continued


@pytest.mark.parametrize("stop", ["kill -9", "SIGTERM", "kill -9 after a snapshot"])
def test_a_restarted_replica_continues_with_a_partial_sync(pair, stop):
    """The anchor (the stream's offset at the start of one of its log
    segments) and the segments after it give a restarted replica its
    offset, after a clean stop or a kill -9, and after its own snapshot
    folded the segments before."""
    primary, replica = pair
    p = primary.client()
    ids = [p.execute_command("QPUSH", "again", f"{i}") for i in range(30)]
    caught_up(primary, replica)
    if stop.endswith("snapshot"):
        bgsave(replica.client())
        ids.append(p.execute_command("QPUSH", "again", "after the snapshot"))
        caught_up(primary, replica)
    replica.kill() if stop.startswith("kill") else replica.stop()
    assert (pathlib.Path(replica.data_dir) / "replication.anchor").exists()
    ids += [p.execute_command("QPUSH", "again", f"more {i}") for i in range(30)]
    claim_one(p, "again", "w")
    partial_before = primary.log().count("(partial sync")
    replica.restart()
    wait_for(lambda: linked(replica), timeout=20, what="the restarted replica's link")
    caught_up(primary, replica)
    assert jobs_of(replica.client(), "again", ids) == jobs_of(p, "again", ids)
    assert "asking to continue from there" in replica.log()
    assert primary.log().count("(partial sync") == partial_before + 1
    ids.append(p.execute_command("QPUSH", "again", "after"))
    caught_up(primary, replica)
    assert jobs_of(replica.client(), "again", ids) == jobs_of(p, "again", ids)


def test_a_promoted_replica_has_no_anchor(pair):
    primary, replica = pair
    anchor = pathlib.Path(replica.data_dir) / "replication.anchor"
    assert anchor.exists()
    assert replica.client().execute_command("REPLICAOF", "NO", "ONE") == b"OK"
    assert not anchor.exists()


@pytest.mark.parametrize("tamper, says", [
    (lambda anchor: anchor.write_text(anchor.read_text().replace('"segment": ', '"segment": 9')),
     "no longer holds the stream"),
    (lambda anchor: anchor.write_text("{not json"), "ignoring"),
])
def test_an_anchor_that_does_not_fit_the_log_means_a_full_sync(pair, tamper, says):
    primary, replica = pair
    p = primary.client()
    ids = [p.execute_command("QPUSH", "fits", f"{i}") for i in range(10)]
    caught_up(primary, replica)
    replica.kill()
    tamper(pathlib.Path(replica.data_dir) / "replication.anchor")
    ids += [p.execute_command("QPUSH", "fits", "more")]
    replica.restart()
    wait_for(lambda: linked(replica), timeout=20, what="the restarted replica's link")
    caught_up(primary, replica)
    assert says in replica.log() and replica.log().count("full sync done") == 2
    assert jobs_of(replica.client(), "fits", ids) == jobs_of(p, "fits", ids)


def test_a_snapshot_larger_than_the_output_buffer_limit_goes_in_chunks(tmp_path):
    """A full sync's snapshot is sent a chunk at a time as the connection
    drains: one larger than client-output-buffer-limit (once sent whole, the
    primary closed its replica's connection and the sync began again)."""
    primary = Daemon(tmp_path / "primary", "--client-output-buffer-limit", "2mb").start()
    replica = None
    try:
        p = primary.client()
        for _ in range(12):
            p.execute_command("QPUSHMANY", "big", 1000, *[b"x" * 500] * 1000)
        replica = Daemon(tmp_path / "replica", "--replicaof", f"127.0.0.1 {primary.port}").start()
        wait_for(lambda: linked(replica), timeout=30, what="the replica's link")
        caught_up(primary, replica)
        assert replica.client().execute_command("QLEN", "big") == 12_000
        sent = re.search(r"snapshot sent \((\d+) bytes\)", primary.log())
        assert sent and int(sent.group(1)) > 4 * 2**20
        assert primary.log().count("asks PSYNC") == 1 and "over client-output-buffer-limit" not in primary.log()
    finally:
        if replica is not None:
            replica.kill()
        primary.kill()


def test_a_full_sync_carries_many_segments_and_the_stream_after_it(tmp_path):
    primary = Daemon(tmp_path / "primary", "--segment-size", "65536").start()
    replica = None
    try:
        p = primary.client()
        for i in range(20):
            p.execute_command("QPUSHMANY", "big", 100, *[f"payload {i}-{k}" * 5 for k in range(100)])
        replica = Daemon(tmp_path / "replica", "--replicaof", f"127.0.0.1 {primary.port}").start()
        p.execute_command("QPUSH", "big", "during")
        wait_for(lambda: linked(replica), timeout=20, what="the replica's link")
        p.execute_command("QPUSH", "big", "after")
        caught_up(primary, replica)
        assert replica.client().execute_command("QLEN", "big") == 2002
        assert replica.client().execute_command("QPEEK", "big", "COUNT", 2) == p.execute_command("QPEEK", "big", "COUNT", 2)
    finally:
        if replica is not None:
            replica.kill()
        primary.kill()


def test_promotion_takes_the_old_primarys_tokens_and_starts_a_new_history(pair):
    primary, replica = pair
    p, r = primary.client(), replica.client()
    p.execute_command("QPUSH", "pr", "a")
    p.execute_command("QPUSH", "pr", "b")
    held = claim_one(p, "pr", "w1", "LEASE", "60000")
    caught_up(primary, replica)
    before = r.info("replication")
    assert r.execute_command("REPLICAOF", "NO", "ONE") == b"OK"
    after = r.info("replication")
    assert after["role"] == "master" and after["master_replid2"] == before["master_replid"]
    assert after["second_repl_offset"] == before["slave_repl_offset"] + 1
    assert after["master_replid"] != before["master_replid"]
    assert r.execute_command("QACK", "pr", held[b"lease"]) == 1          # the old primary's token works here
    assert r.execute_command("QPUSH", "pr", "c") > held[b"id"]
    new = claim_one(r, "pr", "w2")
    assert new[b"lease"] != held[b"lease"]
    assert r.execute_command("ROLE")[0] == b"master"


def test_a_former_primary_told_to_follow_continues_with_a_partial_sync(pair):
    primary, replica = pair
    p, r = primary.client(), replica.client()
    p.execute_command("QPUSH", "fp", "a")
    caught_up(primary, replica)
    r.execute_command("REPLICAOF", "NO", "ONE")
    r.execute_command("QPUSH", "fp", "b")
    assert p.execute_command("REPLICAOF", "127.0.0.1", replica.port) == b"OK"
    assert p.execute_command("REPLICAOF", "127.0.0.1", replica.port) == b"OK Already connected to specified master"
    wait_for(lambda: linked(primary), timeout=20, what="the former primary's link")
    caught_up(replica, primary)
    assert p.execute_command("QLEN", "fp") == 2
    assert "partial sync" in primary.log() and "full sync from" not in primary.log()
    assert refused_as_readonly(p, "QPUSH", "fp", "c")


def test_replicaof_refuses_what_is_not_an_address(daemon):
    c = daemon.client()
    assert error_text(c, "REPLICAOF", "127.0.0.1", "0") == "Invalid master port"
    assert error_text(c, "REPLICAOF", "127.0.0.1", "x") == "value is not an integer or out of range"
    assert error_text(c, "REPLCONF", "nonsense", "1") == "Unrecognized REPLCONF option: nonsense"
    assert error_text(c, "REPLCONF", "listening-port") == "syntax error"
    assert c.execute_command("ROLE")[0] == b"master"


def test_a_bad_replicaof_setting_stops_the_start(tmp_path):
    run = subprocess.run(LEASEQ + ["serve", "--port", "0", "--dir", str(tmp_path / "d"), "--replicaof", "nowhere"],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode != 0
    assert "'replicaof' must be \"host port\", not 'nowhere'" in run.stdout + run.stderr


def test_schedules_fire_on_the_primary_only_and_each_tick_once(pair):
    """A schedule's ticks are FIRE records of the primary's: the replica
    holds each tick's job once, and fires none of its own."""
    primary, replica = pair
    p, r = primary.client(), replica.client()
    p.execute_command("QSCHEDULE", "ticks", "beat", "ping", "EVERY", 100)
    wait_for(lambda: p.execute_command("QLEN", "ticks") >= 3, timeout=10, what="three ticks on the primary")
    p.execute_command("QUNSCHEDULE", "ticks", "beat")
    caught_up(primary, replica)
    fired = p.execute_command("QLEN", "ticks")
    assert r.execute_command("QLEN", "ticks") == fired
    assert [j[b"payload"] for j in map(as_map, r.execute_command("QPEEK", "ticks", "COUNT", 100))] == [b"ping"] * fired


def test_a_promoted_replicas_epoch_is_above_any_the_old_primary_reached(pair):
    import time
    primary, replica = pair
    primary.client().execute_command("QPUSH", "ep", "a")
    caught_up(primary, replica)
    r = replica.client()
    before = int(time.time())
    r.execute_command("REPLICAOF", "NO", "ONE")
    token = claim_one(r, "ep", "w")[b"lease"]
    assert int(token.split(b".")[1], 16) >= before         # <job id>.<epoch>.<lease number>, in hex


def test_sentinels_transaction_promotes_persists_the_role_and_closes_the_clients(tmp_path):
    """What Sentinel sends a replica it promotes, in one MULTI/EXEC, and
    again to the former primary it demotes: the role lands in the config
    file, so each restarts in the role it was given."""
    primary = Daemon(tmp_path / "primary").start()
    conf = tmp_path / "replica.conf"
    conf.write_text("# kept as it is\nloglevel info\n")
    replica = Daemon(tmp_path / "replica", "--config", str(conf), "--replicaof", f"127.0.0.1 {primary.port}").start()
    try:
        wait_for(lambda: linked(replica), timeout=20, what="the replica's link")
        bystander = replica.client()
        bystander.ping()
        pipe = replica.client().pipeline(transaction=True)
        for args in (("SLAVEOF", "NO", "ONE"), ("CONFIG", "REWRITE"), ("CLIENT", "KILL", "TYPE", "normal"),
                     ("CLIENT", "KILL", "TYPE", "pubsub")):
            pipe.execute_command(*args)
        assert pipe.execute() == [True, b"OK", 1, 0]      # (redis-py reads SLAVEOF's +OK as True); the bystander closed
        text = conf.read_text()
        assert text.startswith("# kept as it is\nloglevel info\n") and "replicaof" not in text
        p = primary.client()
        pipe = p.pipeline(transaction=True)
        pipe.execute_command("SLAVEOF", "127.0.0.1", replica.port)
        pipe.execute_command("CONFIG", "REWRITE")
        demoted, rewrite = pipe.execute(raise_on_error=False)        # (started without --config: the
        assert demoted is True and str(rewrite) == "The server is running without a config file"   # rest stands)
        assert p.execute_command("ROLE")[0] == b"slave"
        replica.kill()
        replica.args = ["--config", str(conf)]                          # no --replicaof: the file decides
        replica.restart()
        assert replica.client().execute_command("ROLE")[0] == b"master"
        conf.write_text(text + f"replicaof 127.0.0.1 {primary.port}\n")   # as Redis writes it: two words
        replica.kill()
        replica.restart()
        assert replica.client().execute_command("ROLE")[:3] == [b"slave", b"127.0.0.1", primary.port]
    finally:
        replica.kill()
        primary.kill()


def test_config_rewrite_writes_the_replicas_role_and_changed_settings(tmp_path):
    primary = Daemon(tmp_path / "primary").start()
    conf = tmp_path / "node.conf"
    conf.write_text("fsync-interval 500\n# a comment\nfsync-interval 700\n")
    node = Daemon(tmp_path / "node", "--config", str(conf)).start()
    try:
        c = node.client()
        c.execute_command("CONFIG", "SET", "replica-priority", "7")
        c.execute_command("REPLICAOF", "127.0.0.1", primary.port)
        assert c.execute_command("CONFIG", "REWRITE") == b"OK"
        lines = conf.read_text().splitlines()
        assert lines[:2] == ["fsync-interval 700", "# a comment"]           # its line kept, the second dropped
        assert "replica-priority 7" in lines and f"replicaof 127.0.0.1 {primary.port}" in lines
    finally:
        node.kill()
        primary.kill()


def test_client_kill_type_names_redis_client_kinds(pair):
    primary, replica = pair
    p = primary.client()
    assert error_text(p, "CLIENT", "KILL", "TYPE", "bogus") == "Unknown client type 'bogus'"
    assert p.execute_command("CLIENT", "KILL", "TYPE", "replica") == 1        # its replica, which reconnects
    wait_for(lambda: p.info("replication")["connected_slaves"] == 1, timeout=20, what="the replica to return")
    assert replica.client().execute_command("CLIENT", "KILL", "TYPE", "master") == 1
    wait_for(lambda: linked(replica), timeout=20, what="the replica's link again")
    assert "partial sync" in replica.log()


def test_sentinels_hello_channel_works_on_a_replica(pair):
    """Sentinels find each other by PUBLISH/SUBSCRIBE on __sentinel__:hello,
    on primaries and replicas alike."""
    _primary, replica = pair
    listener = replica.client().pubsub()
    listener.subscribe("__sentinel__:hello")
    wait_for(lambda: listener.get_message(timeout=0.1) is not None, timeout=5, what="the subscribe reply")
    assert replica.client().execute_command("PUBLISH", "__sentinel__:hello", "127.0.0.1,26379,abc,0") == 1
    message = None
    for _ in range(50):
        message = listener.get_message(timeout=0.1)
        if message is not None:
            break
    assert message["channel"] == b"__sentinel__:hello" and message["data"] == b"127.0.0.1,26379,abc,0"
    listener.close()


def test_min_replicas_to_ack_holds_a_push_until_a_replica_has_it_on_disk(tmp_path):
    """With min-replicas-to-ack 1 the primary answers a push only once a
    replica acknowledged the record as fsynced: a stopped replica holds the
    answer back; when it runs again, the answer comes."""
    import signal
    import socket

    from harness import RespSocket
    primary, replica = start_pair(tmp_path, "--min-replicas-to-ack", "1")
    try:
        c = RespSocket(primary.port, timeout=10)
        c.send("QPUSH", "acked", "first")
        assert c.read() == 1                                    # the replica is there: it comes
        replica.proc.send_signal(signal.SIGSTOP)
        c.sock.settimeout(0.5)
        c.send("QPUSH", "acked", "second")
        with pytest.raises(socket.timeout):
            c.read()                                            # held: no replica has it on disk
        assert primary.client().execute_command("QLEN", "acked") == 2
        replica.proc.send_signal(signal.SIGCONT)
        c.sock.settimeout(10)
        assert c.read() == 2
        assert replica.client().execute_command("QLEN", "acked") == 2
        c.sock.close()
    finally:
        replica.proc.send_signal(signal.SIGCONT)
        replica.kill()
        primary.kill()


def payloads(c, q: str) -> list:
    return [as_map(j)[b"payload"] for j in c.execute_command("QPEEK", q, "COUNT", 100)]


def test_a_primarys_disk_fault_starts_a_new_history_and_its_replicas_drop_what_it_dropped(tmp_path):
    """A primary streams a turn's records once written, before its fsync.
    When that fsync fails, the primary cuts them from its log and store
    (their pushes got -MISCONF): its replica must not keep them.  The
    primary starts a new history, and the replica syncs in full."""
    primary, replica = start_pair(tmp_path, env=DEBUG_ENV)
    try:
        p, r = primary.client(), replica.client()
        p.execute_command("QPUSH", "q", "kept")
        caught_up(primary, replica)
        replid = p.info("replication")["master_replid"]
        p.execute_command("DEBUG", "FAULT", "FSYNC", "EIO")
        assert "MISCONF" in error_text(p, "QPUSH", "q", "refused")
        p.execute_command("DEBUG", "FAULT", "FSYNC", "NONE")
        writes_resume(p)
        wait_for(lambda: linked(replica) and payloads(r, "q") == [b"kept", b"after"], 30,
                 "the replica to sync in full and hold what its primary holds")
        assert payloads(p, "q") == [b"kept", b"after"]
        info = p.info("replication")
        assert info["master_replid"] != replid and info["master_replid2"] in (0, "0" * 40)   # (redis-py reads the zeros as 0)
        assert r.info("replication")["master_replid"] == p.info("replication")["master_replid"]
    finally:
        replica.kill()
        primary.kill()


def test_a_replicas_disk_fault_acknowledges_nothing_it_dropped_and_it_continues_from_its_disk(tmp_path):
    """With min-replicas-to-ack 1 a push is answered once the replica has
    it on disk.  A replica whose fsync fails cuts what it had not fsynced:
    it must not acknowledge those records afterwards.  It closes its link,
    and once its disk takes writes it continues from where the cut left its
    log (a partial sync: the primary sends the dropped records again), so
    every answered push is on it."""
    primary, replica = start_pair(tmp_path, "--min-replicas-to-ack", "1", env=DEBUG_ENV)
    try:
        p, r = primary.client(), replica.client()
        p.execute_command("QPUSH", "q", "first")
        r.execute_command("DEBUG", "FAULT", "FSYNC", "EIO")
        pushed = {}
        t = threading.Thread(target=lambda: pushed.update(id=primary.client().execute_command("QPUSH", "q", "held")))
        t.start()
        wait_for(lambda: r.info("replication")["master_link_status"] == "down", 10, "the replica to close its link")
        assert "id" not in pushed                                   # not on the replica's disk: no answer yet
        replid = r.info("replication")["master_replid"]
        r.execute_command("DEBUG", "FAULT", "FSYNC", "NONE")
        t.join(30)
        assert "id" in pushed
        wait_for(lambda: linked(replica), 30, "the replica's link after its partial sync")
        assert primary.log().count("continues from offset") == 1 and primary.log().count(": full sync") == 1
        assert r.info("replication")["master_replid"] == replid
        assert payloads(r, "q") == payloads(p, "q") == [b"first", b"held"]
        primary.kill()                                              # the answered push survives its primary
        r.execute_command("REPLICAOF", "NO", "ONE")
        assert payloads(r, "q") == [b"first", b"held"]
    finally:
        replica.kill()
        primary.kill()


def test_a_replica_whose_directory_is_removed_puts_it_back_and_continues(tmp_path):
    """A replica's data directory removed under it (daemon/dirwatch.py): it
    stops acknowledging, makes the directory again with a snapshot of what
    it holds, and continues from where it was (it dropped nothing), so an
    answered push is on its disk, even after a kill -9."""
    import shutil
    primary, replica = start_pair(tmp_path, "--min-replicas-to-ack", "1")
    try:
        p, r = primary.client(), replica.client()
        p.execute_command("QPUSH", "q", "first")
        shutil.rmtree(replica.data_dir)
        wait_for(lambda: "writes resume" in replica.log(), 10, "the replica's queues back on its disk")
        wait_for(lambda: linked(replica), 20, "the replica's link")
        assert "continues from offset" in primary.log()             # a partial sync: nothing was dropped
        assert p.execute_command("QPUSH", "q", "second") == 2
        replica.kill()
        replica.restart()
        assert payloads(replica.client(), "q") == [b"first", b"second"]
    finally:
        replica.kill()
        primary.kill()


def test_a_replica_fsyncs_heavy_turns_on_its_loops_thread(tmp_path):
    """A primary hands a heavy turn's fsync to the log's thread (its loop
    serves clients meanwhile); a replica runs every fsync on its loop's
    thread, heavy or light, and acknowledges right after it."""
    primary, replica = start_pair(tmp_path, "--min-replicas-to-ack", "1")
    try:
        p = primary.client()
        p.execute_command("QCREATE", "heavy", "DURABILITY", "fsync")
        before_p, before_r = fsync_counts(primary.client()), fsync_counts(replica.client())
        payload = "x" * 1000
        for _ in range(10):                                   # 50 KB a command: a heavy turn on both nodes
            assert len(p.execute_command("QPUSHMANY", "heavy", 50, *[payload] * 50)) == 50
        caught_up(primary, replica)
        (fp, ip), (fr, ir) = fsync_counts(primary.client()), fsync_counts(replica.client())
        assert fp - before_p[0] >= 10 and ip == before_p[1]    # every push waited for an fsync of the thread's
        assert fr - before_r[0] >= 1 and fr - before_r[0] == ir - before_r[1]   # the replica's: all on its loop
        assert replica.client().execute_command("QLEN", "heavy") == 500
    finally:
        replica.kill()
        primary.kill()


def test_min_replicas_to_write_refuses_writes_without_a_good_replica(tmp_path):
    import signal
    primary = Daemon(tmp_path / "primary", "--min-replicas-to-write", "1", "--min-replicas-max-lag", "2").start()
    replica = None
    try:
        p = primary.client()
        assert error_text(p, "QPUSH", "gate", "x") == "NOREPLICAS Not enough good replicas to write."
        assert p.execute_command("INFO", "replication")                                  # reads go on
        replica = Daemon(tmp_path / "replica", "--replicaof", f"127.0.0.1 {primary.port}").start()
        wait_for(lambda: p.info("replication").get("min_slaves_good_slaves") == 1, timeout=20,
                 what="a good replica")
        assert p.execute_command("QPUSH", "gate", "x") == 1
        replica.proc.send_signal(signal.SIGSTOP)                                      # no more ACKs
        wait_for(lambda: p.info("replication")["min_slaves_good_slaves"] == 0, timeout=20, what="the lag")
        assert error_text(p, "QPUSH", "gate", "y") == "NOREPLICAS Not enough good replicas to write."
        replica.proc.send_signal(signal.SIGCONT)
        wait_for(lambda: p.info("replication")["min_slaves_good_slaves"] == 1, timeout=20, what="the replica back")
        assert p.execute_command("QPUSH", "gate", "z") == 2
    finally:
        if replica is not None:
            replica.proc.send_signal(signal.SIGCONT)
            replica.kill()
        primary.kill()


def test_metrics_say_the_role_the_link_and_the_lag(tmp_path):
    import urllib.request
    from harness import free_port
    http = [free_port(), free_port()]
    primary = Daemon(tmp_path / "primary", "--http-port", str(http[0])).start()
    replica = Daemon(tmp_path / "replica", "--http-port", str(http[1]),
                     "--replicaof", f"127.0.0.1 {primary.port}").start()
    try:
        wait_for(lambda: linked(replica), timeout=20, what="the replica's link")
        primary.client().execute_command("QPUSH", "m", "x")
        caught_up(primary, replica)

        def metrics(port: int) -> dict:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
                lines = reply.read().decode().splitlines()
            return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in lines
                    if line.startswith("leaseq_replication_")}
        p, r = metrics(http[0]), metrics(http[1])
        assert (p["leaseq_replication_replica"], r["leaseq_replication_replica"]) == (0, 1)
        assert r["leaseq_replication_link_up"] == 1 and p["leaseq_replication_connected_replicas"] == 1
        assert p["leaseq_replication_offset_bytes"] == r["leaseq_replication_offset_bytes"] > 0
        name = f'leaseq_replication_replica_lag_bytes{{replica="127.0.0.1:{replica.port}"}}'
        wait_for(lambda: metrics(http[0])[name] == 0, timeout=10, what="the replica's acknowledgement")
        replica.kill()
        wait_for(lambda: metrics(http[0])["leaseq_replication_connected_replicas"] == 0, timeout=10,
                 what="the replica gone")
    finally:
        replica.kill()
        primary.kill()


def test_wait_counts_the_replicas_that_have_what_was_written(pair):
    """WAIT numreplicas timeout, as Redis's: at once when enough replicas
    acknowledged, else when they do, or at the timeout with fewer."""
    import signal
    import time
    primary, replica = pair
    p = primary.client()
    # a replica acknowledges as soon as it is synced, not at its first periodic acknowledgement (1 s)
    assert p.execute_command("WAIT", 1, 900) == 1
    p.execute_command("QPUSH", "w", "a")
    assert p.execute_command("WAIT", 1, 5000) == 1
    assert p.execute_command("WAIT", 2, 200) == 1                     # only one there: the timeout answers
    replica.proc.send_signal(signal.SIGSTOP)
    try:
        p.execute_command("QPUSH", "w", "b")
        started = time.monotonic()
        assert p.execute_command("WAIT", 1, 300) == 0                    # it has not got "b"
        assert time.monotonic() - started >= 0.25
    finally:
        replica.proc.send_signal(signal.SIGCONT)
    assert p.execute_command("WAIT", 1, 0) == 1                            # 0: until it has
    pipe = p.pipeline(transaction=True)
    pipe.execute_command("QPUSH", "w", "c")
    pipe.execute_command("WAIT", 1, 0)
    assert pipe.execute()[1] in (0, 1)                                     # inside MULTI: at once
    assert error_text(replica.client(), "WAIT", 1, 10) == "WAIT cannot be used with replica instances."
    assert error_text(p, "WAIT", 1, -1) == "timeout is negative"
    assert error_text(p, "WAIT", 1, "soon") == "timeout is not an integer or out of range"


def test_waitaof_waits_for_this_nodes_fsync_and_the_replicas_disks(tmp_path):
    """WAITAOF numlocal numreplicas timeout, as Redis 7.2's, the log standing
    for the append-only file: the fsync it waits for is asked for at once,
    not at the next fsync-interval (a minute here)."""
    import signal
    primary, replica = start_pair(tmp_path, "--fsync-interval", "60000")
    try:
        _waitaof(primary, replica, signal)
    finally:
        replica.kill()
        primary.kill()


def _waitaof(primary, replica, signal) -> None:
    p = primary.client()
    p.execute_command("QCREATE", "later", "DURABILITY", "async")       # answered before its fsync
    p.execute_command("QPUSH", "later", "first")                      # (its block of ids is fsynced)
    p.execute_command("QPUSH", "later", "a")
    before = fsync_counts(p)[0]
    assert p.execute_command("WAITAOF", 1, 1, 10_000) == [1, 1]
    assert fsync_counts(p)[0] > before                                # one fsync, not a minute's wait
    assert p.execute_command("WAITAOF", 1, 1, 0) == [1, 1]            # nothing new: at once
    p.execute_command("QCREATE", "mem", "DURABILITY", "memory")      # not in the log: nothing to wait for
    p.execute_command("QPUSH", "mem", "m")
    assert p.execute_command("WAITAOF", 1, 1, 0) == [1, 1]
    replica.proc.send_signal(signal.SIGSTOP)
    try:
        p.execute_command("QPUSH", "later", "b")
        assert p.execute_command("WAITAOF", 1, 1, 300) == [1, 0]        # the timeout answers: here, not there
        pipe = p.pipeline(transaction=True)
        pipe.execute_command("QPUSH", "later", "c")
        pipe.execute_command("WAITAOF", 0, 1, 0)
        assert pipe.execute()[1][1] == 0                                # inside MULTI: at once
    finally:
        replica.proc.send_signal(signal.SIGCONT)
    # 0: until it has; numlocal 0 asks for no fsync here, and "c" (async) is not on this disk yet
    assert p.execute_command("WAITAOF", 0, 1, 0) == [0, 1]
    assert p.execute_command("WAITAOF", 1, 1, 0) == [1, 1]
    r = replica.client()
    assert error_text(r, "WAITAOF", 0, 0, 0) == ("WAITAOF cannot be used with replica instances. Please also note "
                                                 "that writes to replicas are just local and are not propagated.")
    for args, text in (((2, 0, 0), "value is out of range, value must between 0 and 1"),
                       ((-1, 0, 0), "value is out of range, value must between 0 and 1"),
                       (("x", 0, 0), "value is not an integer or out of range"),
                       ((0, -1, 0), "value is out of range, must be positive"),
                       ((0, 0, -1), "timeout is negative"),
                       ((0, 0, "soon"), "timeout is not an integer or out of range")):
        assert error_text(p, "WAITAOF", *args) == text, args


def test_a_wait_given_up_by_its_connection_leaves_nothing_behind(pair):
    from harness import RespSocket
    primary, _replica = pair
    p = primary.client()
    before = p.info("clients")["connected_clients"]
    c = RespSocket(primary.port)
    c.send("WAIT", 5, 0)                                 # five replicas will never come
    wait_for(lambda: p.info("clients")["connected_clients"] == before + 1, timeout=10, what="the WAIT to arrive")
    c.sock.close()
    wait_for(lambda: p.info("clients")["connected_clients"] == before, timeout=10, what="the closed connection to go")
    assert p.execute_command("WAIT", 1, 1000) == 1 and "Traceback" not in primary.log()


def test_a_replica_silent_beyond_repl_timeout_is_dropped_and_comes_back(tmp_path):
    import signal
    primary, replica = start_pair(tmp_path, "--repl-timeout", "2", "--repl-ping-replica-period", "1")
    try:
        p = primary.client()
        p.execute_command("QPUSH", "silent", "x")
        caught_up(primary, replica)
        replica.proc.send_signal(signal.SIGSTOP)                # hung: it acknowledges nothing
        wait_for(lambda: p.info("replication")["connected_slaves"] == 0, timeout=10,
                 what="the primary to drop its silent replica")
        assert "no acknowledgement for" in primary.log() and "(repl-timeout 2 s)" in primary.log()
        p.execute_command("QPUSH", "silent", "y")
        replica.proc.send_signal(signal.SIGCONT)                # back: it reconnects and catches up
        wait_for(lambda: p.info("replication")["connected_slaves"] == 1, timeout=20, what="the replica back")
        caught_up(primary, replica)
        assert replica.client().execute_command("QLEN", "silent") == 2
    finally:
        replica.proc.send_signal(signal.SIGCONT)
        replica.kill()
        primary.kill()


def pings_in_log(data_dir) -> int:
    """The PING records in a node's log segments."""
    from leaseq.storage import records
    n = 0
    for seg in sorted(pathlib.Path(data_dir).glob("seg-*.wal")):
        data = seg.read_bytes()
        n += sum(rtype == records.PING for _at, rtype, _body in records.iter_frames(data, records.SEGMENT_HEADER_SIZE))
    return n


def test_an_idle_primary_pings_its_replicas_which_stay_linked_and_log_the_pings(tmp_path):
    """docs/replication.md, "Silent peers": an idle primary writes a PING
    record every repl-ping-replica-period; the replica hears it (so its
    repl-timeout, shorter than the idle time here, never fires), writes it
    to its own log at the same offset, and restarts from that log."""
    primary, replica = start_pair(tmp_path, "--repl-timeout", "3", "--repl-ping-replica-period", "1")
    try:
        p, r = primary.client(), replica.client()
        p.execute_command("QPUSH", "idle", "x")
        caught_up(primary, replica)
        start = p.info("replication")["master_repl_offset"]
        quiet_until = time.monotonic() + 5                       # idle well past repl-timeout
        while time.monotonic() < quiet_until:
            info = r.info("replication")
            assert info["master_link_status"] == "up" and info["master_last_io_seconds_ago"] <= 2, info
            time.sleep(0.2)
        assert p.info("replication")["master_repl_offset"] > start            # the PINGs moved the stream
        caught_up(primary, replica)
        assert "nothing from the primary" not in replica.log()
        replica.kill()                                           # SIGKILL: its log, PINGs and all, replays
        assert pings_in_log(replica.data_dir) >= 3
        check = subprocess.run(LEASEQ + ["check", replica.data_dir], capture_output=True, text=True, check=False)
        assert check.returncode == 0, check.stdout + check.stderr
        replica.restart()
        wait_for(lambda: linked(replica), timeout=20, what="the restarted replica's link")
        caught_up(primary, replica)
        assert replica.client().execute_command("QLEN", "idle") == 1
        assert "(partial sync)" in replica.log()
    finally:
        replica.kill()
        primary.kill()
    assert pings_in_log(primary.data_dir) >= 3


def test_a_replica_drops_the_link_to_a_hung_primary_and_links_again(tmp_path):
    """A primary that hangs with its connection open (SIGSTOP) sends no
    PING: after repl-timeout the replica says its link is down, and once
    the primary runs again the replica links and continues."""
    import signal
    primary, replica = start_pair(tmp_path, "--repl-timeout", "2", "--repl-ping-replica-period", "1")
    try:
        p, r = primary.client(), replica.client()
        p.execute_command("QPUSH", "hung", "x")
        caught_up(primary, replica)
        primary.proc.send_signal(signal.SIGSTOP)
        wait_for(lambda: r.info("replication")["master_link_status"] == "down", timeout=15,
                 what="the replica to give up its silent primary")
        down = r.info("replication")
        assert down["master_last_io_seconds_ago"] == -1 and down["master_link_down_since_seconds"] >= 0, down
        assert "nothing from the primary for" in replica.log() and "(repl-timeout 2 s)" in replica.log()
        primary.proc.send_signal(signal.SIGCONT)
        wait_for(lambda: linked(replica), timeout=20, what="the link back")
        p.execute_command("QPUSH", "hung", "y")
        caught_up(primary, replica)
        assert r.execute_command("QLEN", "hung") == 2
    finally:
        primary.proc.send_signal(signal.SIGCONT)
        replica.kill()
        primary.kill()


def test_repl_ping_replica_period_must_be_at_least_one(daemon):
    c = daemon.client()
    with pytest.raises(redis.ResponseError, match="repl-ping-replica-period"):
        c.config_set("repl-ping-replica-period", 0)
    assert c.config_get("repl-ping-replica-period") == {"repl-ping-replica-period": "10"}
    c.config_set("repl-ping-replica-period", 3)
    assert c.config_get("repl-ping-replica-period") == {"repl-ping-replica-period": "3"}


@pytest.mark.parametrize("seconds", [7, 0])
def test_tcp_keepalive_is_set_on_clients_and_on_the_replicas_link(tmp_path, seconds):
    """``ss`` shows the kernel's keepalive timer on a socket that has
    SO_KEEPALIVE: on the primary's side of a client's connection, and on
    the replica's side of its link to the primary."""
    primary, replica = start_pair(tmp_path, "--tcp-keepalive", str(seconds))
    try:
        c = primary.client()
        c.ping()

        def sockets(d: Daemon, side: str) -> list[str]:
            """The lines of ``d``'s own established sockets with the primary's port on ``side``."""
            out = subprocess.run(["ss", "-tnopH", "state", "established", f"( {side} = :{primary.port} )"],
                                 capture_output=True, text=True, check=True).stdout
            return [line for line in out.splitlines() if f"pid={d.proc.pid}," in line]

        def kept_alive() -> list[bool]:
            served = sockets(primary, "sport")         # the primary's side of its clients (us, the replica)
            link = sockets(replica, "dport")           # the replica's side of its link
            assert len(served) == 2 and len(link) == 1, (served, link)
            # (while bytes are unacknowledged ss shows the retransmission timer instead: "timer:(on,...")
            return [("timer:(keepalive" in line) for line in served + link if "timer:(on" not in line]

        wait_for(lambda: kept_alive() == [bool(seconds)] * 3, timeout=5, what=f"keepalive {bool(seconds)} on 3 sockets")
    finally:
        replica.kill()
        primary.kill()


def test_a_replica_of_a_replica_holds_what_the_primary_wrote(tmp_path):
    """Chained: the middle node streams on what it applies, with the
    primary's history and offsets, so the last one can continue after a
    promotion of the middle one too."""
    primary, middle = start_pair(tmp_path)
    last = Daemon(tmp_path / "last", "--replicaof", f"127.0.0.1 {middle.port}").start()
    try:
        wait_for(lambda: linked(last), timeout=20, what="the last replica's link")
        p = primary.client()
        ids = [p.execute_command("QPUSH", "chain", f"{i}") for i in range(20)]
        claim_one(p, "chain", "w")
        caught_up(primary, middle)
        caught_up(middle, last)
        assert jobs_of(last.client(), "chain", ids) == jobs_of(p, "chain", ids)
        replid = p.info("replication")["master_replid"]
        assert last.client().info("replication")["master_replid"] == replid
        assert last.client().info("replication")["slave_repl_offset"] == p.info("replication")["master_repl_offset"]
        primary.kill()                                   # the middle one is promoted; the last one continues
        assert middle.client().execute_command("REPLICAOF", "NO", "ONE") == b"OK"
        ids.append(middle.client().execute_command("QPUSH", "chain", "after"))
        caught_up(middle, last)
        assert jobs_of(last.client(), "chain", ids) == jobs_of(middle.client(), "chain", ids)
        assert "full sync from" in last.log() and last.log().count("full sync from") == 1
    finally:
        last.kill()
        middle.kill()
        primary.kill()


@pytest.mark.parametrize("end", ["QNACK", "QCANCEL"])
def test_a_replicas_blocked_qresult_hears_of_a_death_or_a_cancel_on_the_primary(pair, end):
    """A job's end is one step, replayed records included: a QRESULT BLOCK
    parked on the replica is answered -DEAD when the primary's DEAD or
    CANCEL record arrives (not left to its BLOCK's end, a nil)."""
    import threading
    primary, replica = pair
    p, r = primary.client(), replica.client()
    jid = p.execute_command("QPUSH", "rq", "doomed")
    lease = claim_one(p, "rq", "w1")[b"lease"]
    caught_up(primary, replica)
    got: dict = {}

    def wait() -> None:
        w = replica.client(protocol=2)
        try:
            got["reply"] = w.execute_command("QRESULT", "rq", jid, "BLOCK", 20_000)
        except redis.ResponseError as e:
            got["reply"] = str(e)
        w.close()

    t = threading.Thread(target=wait, daemon=True)
    t.start()
    wait_for(lambda: r.info("clients")["blocked_clients"] == 1, 5, "QRESULT blocked on the replica")
    if end == "QNACK":
        assert p.execute_command("QNACK", "rq", lease, "DEAD") == 1
    else:
        assert p.execute_command("QCANCEL", "rq", jid) == 1
    t.join(25)
    assert not t.is_alive()
    assert got["reply"] == ("DEAD nack" if end == "QNACK" else "DEAD cancelled")


def test_a_record_that_does_not_apply_drops_the_link_and_keeps_what_came_before_it(tmp_path):
    """A stand-in primary (a socket here, not a leaseq) continues a
    replica's stream with a queue, a push, then a record of a type no
    leaseq writes.  The replica drops the link and says why; the push
    that came in the same read before it is applied and in its log alike,
    so it is there after a kill -9 and restart."""
    import socket
    import threading

    from leaseq.storage import records
    from leaseq.storage.frames import frame
    from leaseq.storage.job import Job

    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(20)
    stream = (frame(records.QUEUE, records.queue(1, 1000, b"q", {}))
              + frame(records.PUSH, records.push(1, 1000, [Job(1, b"kept", 0, 1000, 1000)]))
              + frame(99, b"not a record"))

    def primary() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(20)
            for last, answer in ((b"psync2", b"+PONG\r\n+OK\r\n+OK\r\n"),     # PING, REPLCONF x2
                                 (b"PSYNC", b"+CONTINUE " + b"c" * 40 + b"\r\n" + stream)):
                said = b""
                while last not in said or not said.endswith(b"\r\n"):
                    said += conn.recv(4096)
                conn.sendall(answer)
            time.sleep(1)

    stand_in = threading.Thread(target=primary, daemon=True)
    stand_in.start()
    replica = Daemon(tmp_path / "replica", "--replicaof", f"127.0.0.1 {listener.getsockname()[1]}").start()
    try:
        wait_for(lambda: "does not apply" in replica.log(), timeout=20, what="the replica to refuse the record")
        stand_in.join(20)
        listener.close()
        assert "a record from the primary does not apply (unknown record type 99)" in replica.log()
        assert replica.client().execute_command("QLEN", "q") == 1
        replica.kill()
        replica.restart()
        c = replica.client()
        assert c.execute_command("QLEN", "q") == 1
        assert as_map(c.execute_command("QGET", "q", 1))[b"payload"] == b"kept"
    finally:
        listener.close()
        replica.kill()
