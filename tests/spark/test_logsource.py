"""The ``leaseq-log`` data source (leaseq.pipeline.logsource): a log the
test wrote through a real daemon reads back as the events the test caused,
in order; archive-dir and the data directory read together; a torn tail is
skipped and corruption elsewhere is named; many pods' directories (a glob,
commas, sourcePattern) read as one dataset with a source column."""

from __future__ import annotations

import os
import shutil

import pytest

from harness import Daemon, as_map, unique, wait_for
from harness_disk import write_segment

from leaseq.storage import records


def read(spark, *paths):
    df = spark.read.format("leaseq-log").load(",".join(str(p) for p in paths))
    return df


def rows(df) -> list[tuple]:
    return [(r.queue, r.event, r.id, r.consumer, r.priority, r.payload_bytes, r.error) for r in df.collect()]


def token(reply) -> bytes:
    return as_map(reply[0])[b"lease"]


def test_the_log_reads_back_as_the_events_the_test_caused(spark, tmp_path):
    d = Daemon(str(tmp_path / "data")).start()
    try:
        c = d.client()
        c.execute_command("QCREATE", "q", "DEADLETTER", "dl")
        a = c.execute_command("QPUSH", "q", "a", "PRIORITY", 7)
        b, cc = c.execute_command("QPUSHMANY", "q", 2, "bb", "ccc")
        first = c.execute_command("QCLAIM", "q", "w1", "COUNT", 2, "LEASE", 60_000)
        t_a, t_b = as_map(first[0])[b"lease"], as_map(first[1])[b"lease"]
        c.execute_command("QACK", "q", t_a)
        c.execute_command("QNACK", "q", t_b, "DELAY", 0, "ERROR", "boom")
        t_b2 = token(c.execute_command("QCLAIM", "q", "w2", "LEASE", 60_000))     # b again: ready-again first
        c.execute_command("QEXTEND", "q", t_b2, "LEASE", 90_000)
        c.execute_command("QNACK", "q", t_b2, "DEAD", "ERROR", "fatal")             # into dl as job 1
        c.execute_command("QDEL", "q", cc)
        assert c.execute_command("QREDRIVE", "dl") == 1                             # back into q as a new job
        assert c.execute_command("QDROP", "dl") == 0
        events = read(spark, d.data_dir)
        assert events.schema.simpleString() == (
            "struct<ts:timestamp,queue:string,event:string,id:bigint,deliveries:int,consumer:string,"
            "priority:int,payload_bytes:bigint,error:string,source:string,meta:map<string,string>>")
        got = rows(events)
        new_in_q = max(a, b, cc) + 1          # ids are per queue: QREDRIVE's new job in q
        assert got == [
            ("q", "push", a, None, 7, 1, None),
            ("q", "push", b, None, 5, 2, None),
            ("q", "push", cc, None, 5, 3, None),
            ("q", "claim", a, "w1", None, None, None),
            ("q", "claim", b, "w1", None, None, None),
            ("q", "ack", a, None, None, None, None),
            ("q", "nack", b, None, None, None, "boom"),
            ("q", "claim", b, "w2", None, None, None),
            ("q", "extend", b, None, None, None, None),
            ("q", "nack", b, None, None, None, "fatal"),     # QNACK DEAD: the nack keeps its error ...
            ("q", "dead", b, None, None, None, "nack"),      # ... and the job dies, reason nack
            ("dl", "push", 1, None, None, None, "nack"),
            ("q", "delete", cc, None, None, None, None),
            ("dl", "redrive", 1, None, None, None, None),
            ("q", "push", new_in_q, None, None, None, None),
            ("dl", "purge", None, None, None, None, None),
        ]
        ts = [r.ts for r in events.collect()]
        assert ts == sorted(ts) and ts[0].year >= 2024
    finally:
        d.stop()


def test_meta_is_a_map_column_on_the_push_rows_of_jobs_that_have_it(spark, tmp_path):
    """META as a map of text on ``push`` rows (both the columns path of a
    PUSH and the job-by-job path of one with parents); null elsewhere."""
    d = Daemon(str(tmp_path / "data")).start()
    try:
        c = d.client()
        plain = c.execute_command("QPUSH", "q", "p")
        many = c.execute_command("QPUSHMANY", "q", 2, "a", "b", "META", "tenant", "acme", "bin", b"\xff")
        child = c.execute_command("QPUSH", "q", "c", "AFTER", 1, "q", plain, "META", "trace", "t1")
        c.execute_command("QCLAIM", "q", "w", "COUNT", 1)
        got = [(r.event, r.id, r.meta) for r in read(spark, d.data_dir).collect()]
        tagged = {"tenant": "acme", "bin": "\ufffd"}
        assert got == [("push", plain, None), ("push", many[0], tagged), ("push", many[1], tagged),
                       ("push", child, {"trace": "t1"}), ("wait", child, {"trace": "t1"}), ("claim", plain, None)]
    finally:
        d.stop()


def test_archive_and_data_directory_read_together_each_segment_once(spark, tmp_path):
    archive = tmp_path / "archive"
    d = Daemon(str(tmp_path / "data")).start()
    try:
        c = d.client()
        c.config_set("archive-dir", str(archive))
        pushed = 0
        for round in range(3):
            pushed += len(c.execute_command("QPUSHMANY", "q", 10, *[b"x"] * 10))
            c.execute_command("BGSAVE")
            wait_for(lambda: c.info("persistence")["snapshots_taken"] == round + 1
                     and not c.info("persistence")["snapshot_in_progress"], 10, "the snapshot")
        assert os.listdir(archive)
        both = read(spark, d.data_dir, archive, d.data_dir)          # a directory twice counts once
        assert both.filter("event = 'push'").count() == pushed
        assert read(spark, d.data_dir).filter("event = 'push'").count() < pushed
        assert both.rdd.getNumPartitions() == len(os.listdir(archive)) + len(
            [n for n in os.listdir(d.data_dir) if n.endswith(".wal")])
    finally:
        d.stop()


def test_a_torn_tail_is_skipped_and_corruption_elsewhere_is_named(spark, tmp_path):
    d = Daemon(str(tmp_path / "data")).start()
    d.client().execute_command("QPUSHMANY", "q", 3, "a", "b", "c")
    d.kill()
    d.restart()                                       # a second segment: the first is sealed now
    d.client().execute_command("QPUSHMANY", "q", 3, "d", "e", "f")
    d.kill()
    first, newest = sorted(n for n in os.listdir(d.data_dir) if n.endswith(".wal"))
    garbage = b"\x01\x02\x03 half a record"
    torn = tmp_path / "torn"
    shutil.copytree(d.data_dir, torn)
    with open(torn / newest, "ab") as f:              # what a live daemon or a crash leaves
        f.write(garbage)
    assert read(spark, torn).filter("event = 'push'").count() == 6
    # the room the daemon reserved past its last record, left by the kill: in
    # a segment that is no longer the newest it is that segment's end too
    roomy = tmp_path / "roomy"
    shutil.copytree(d.data_dir, roomy)
    data = (roomy / newest).read_bytes()
    end = [off + records.FRAME_SIZE + len(body) for off, _t, body
           in records.iter_frames(data, records.SEGMENT_HEADER_SIZE)][-1]
    assert end < len(data) and records.reserved_from(data, end)
    write_segment(roomy, int(newest[4:24]) + 1, b"")
    assert read(spark, roomy).filter("event = 'push'").count() == 6
    # ... but not in one two before the newest: cut when sealed, so that is damage
    write_segment(roomy, int(newest[4:24]) + 2, b"")
    with pytest.raises(Exception) as e:
        read(spark, roomy).count()
    assert f"{newest} at offset {end}: a record fails its checksum or is cut short" in str(e.value)
    bad = tmp_path / "bad"
    shutil.copytree(d.data_dir, bad)
    size = os.path.getsize(bad / first)
    with open(bad / first, "ab") as f:
        f.write(garbage)
    with pytest.raises(Exception) as e:
        read(spark, bad).count()
    assert f"{first} at offset {size}: a record fails its checksum or is cut short" in str(e.value)


def test_a_primarys_ping_records_give_no_rows(spark, tmp_path):
    """PING (a primary's keepalive in its replication stream) is in the log
    of a primary and of its replicas, and is no event."""
    d = Daemon(str(tmp_path / "data")).start()
    d.client().execute_command("QPUSHMANY", "q", 2, "a", "b")
    d.kill()
    newest = max(n for n in os.listdir(d.data_dir) if n.endswith(".wal"))
    pings = b"".join(records.frame(records.PING, records.ping(1_700_000_000_000 + i)) for i in range(3))
    write_segment(d.data_dir, int(newest[4:24]) + 1, pings)
    events = read(spark, d.data_dir).groupBy("event").count().collect()
    assert {r["event"]: r["count"] for r in events} == {"push": 2}


def test_a_path_that_is_not_a_directory_is_refused(spark, tmp_path):
    with pytest.raises(Exception) as e:
        read(spark, tmp_path / "nope").count()
    assert "is not a directory" in str(e.value)


def test_expiry_deliveries_and_purge_are_events(spark, tmp_path):
    d = Daemon(str(tmp_path / "data"), env={"LEASEQ_ENABLE_DEBUG_COMMAND": "yes"}).start()
    try:
        c = d.client()
        c.execute_command("DEBUG", "CLOCK", "FREEZE")
        j = c.execute_command("QPUSH", "q", "x")
        c.execute_command("QCLAIM", "q", "w1", "LEASE", 1000)
        c.execute_command("DEBUG", "CLOCK", "ADVANCE", 1500)
        assert c.execute_command("QLEN", "q") == 1                     # a look: the lease ran out
        c.execute_command("QCLAIM", "q", "w2", "LEASE", 1000)          # delivered again
        p1, p2 = c.execute_command("QPUSHMANY", "p", 2, "a", "b")
        assert c.execute_command("QPURGE", "p") == 2
        got = [(r.queue, r.event, r.id, r.deliveries, r.consumer)
               for r in read(spark, d.data_dir).filter("event in ('claim', 'expire', 'purge')").collect()]
        assert got == [("q", "claim", j, 1, "w1"), ("q", "expire", j, None, None), ("q", "claim", j, 2, "w2"),
                       ("p", "purge", p1, None, None), ("p", "purge", p2, None, None)]
    finally:
        d.stop()


def test_schedules_parents_replacements_results_and_cancels_are_events(spark, tmp_path):
    """A schedule's ticks (``push`` + ``fire``, and ``skip``), a job pushed with
    parents (``push`` + ``wait``, and ``unblock`` with its parent's ack), a
    KEY ... REPLACE (``replace``), an ack with a RESULT (``ack`` + ``result``)
    and a QCANCEL (``cancel``)."""
    d = Daemon(str(tmp_path / "data"), env={"LEASEQ_ENABLE_DEBUG_COMMAND": "yes"}).start()
    try:
        c = d.client()
        c.execute_command("DEBUG", "CLOCK", "FREEZE")
        c.execute_command("QSCHEDULE", "s", "beat", "x", "EVERY", 1000, "MISFIRE", "skip")
        c.execute_command("DEBUG", "CLOCK", "ADVANCE", 1000)             # one tick in time: job 1
        c.execute_command("DEBUG", "CLOCK", "ADVANCE", 3000)             # 2000 missed, 3000 and 4000 in time
        parent = c.execute_command("QPUSH", "w", "p")
        child = c.execute_command("QPUSH", "w", "c", "AFTER", 1, "w", parent)
        c.execute_command("QACK", "w", token(c.execute_command("QCLAIM", "w", "x", "LEASE", 60_000)))
        held = c.execute_command("QPUSH", "r", "v1", "KEY", "k")
        c.execute_command("QPUSH", "r", "v22", "KEY", "k", "REPLACE", "PRIORITY", 8)
        answered = c.execute_command("QPUSH", "a", "question")
        c.execute_command("QACK", "a", token(c.execute_command("QCLAIM", "a", "x", "LEASE", 60_000)),
                          "RESULT", "forty-two")
        c.execute_command("QCANCEL", "r", held)
        got = [(r.queue, r.event, r.id, r.deliveries, r.consumer, r.priority, r.payload_bytes)
               for r in read(spark, d.data_dir).collect()]
        assert got == [
            ("s", "push", 1, None, None, None, None), ("s", "fire", 1, None, "beat", None, None),
            ("s", "push", 2, None, None, None, None), ("s", "fire", 2, None, "beat", None, None),
            ("s", "push", 3, None, None, None, None), ("s", "fire", 3, None, "beat", None, None),
            ("s", "skip", None, 1, "beat", None, None),
            ("w", "push", parent, None, None, 5, 1),
            ("w", "push", child, None, None, 5, 1), ("w", "wait", child, None, None, 5, 1),
            ("w", "claim", parent, 1, "x", None, None), ("w", "ack", parent, None, None, None, None),
            ("w", "unblock", child, None, None, None, None),
            ("r", "push", held, None, None, 5, 2), ("r", "replace", held, None, None, 8, 3),
            ("a", "push", answered, None, None, 5, 8), ("a", "claim", answered, 1, "x", None, None),
            ("a", "ack", answered, None, None, None, None), ("a", "result", answered, None, None, None, 9),
            ("r", "cancel", held, None, None, None, None),
        ]
    finally:
        d.stop()


def pods(tmp_path, work: dict) -> dict:
    """One real daemon per pod under ``tmp_path/pods/<pod>/data``, each
    doing its own ``work(client)``; all stopped after.  Returns pod -> the
    ids it pushed (they collide across pods: every daemon counts from 1)."""
    pushed = {}
    for pod, job in work.items():
        (tmp_path / "pods" / pod).mkdir(parents=True)
        d = Daemon(str(tmp_path / "pods" / pod / "data"), "--segment-size", "4096")
        d.start()
        try:
            pushed[pod] = job(d.client())
        finally:
            d.stop()
    return pushed


def work(n: int, claimed: int):
    def run(c) -> list:
        ids = list(c.execute_command("QPUSHMANY", "jobs", n, *[b"p" * 200] * n))
        for _ in range(claimed):
            c.execute_command("QACK", "jobs", token(c.execute_command("QCLAIM", "jobs", "w", "LEASE", 60_000)))
        return ids
    return run


def test_many_pods_read_as_one_dataset_with_a_source_column(spark, tmp_path):
    pushed = pods(tmp_path, {"pod-a": work(40, 10), "pod-b": work(25, 5), "pod-c": work(7, 7)})
    assert pushed["pod-a"][:7] == pushed["pod-c"]                      # the same ids in two pods
    by_glob = read(spark, tmp_path / "pods" / "*" / "data")
    by_commas = read(spark, *[tmp_path / "pods" / p / "data" for p in ("pod-c", "pod-a", "pod-b")])
    for events in (by_glob, by_commas):
        got = {(r.source, r.event): r["count"] for r in events.groupBy("source", "event").count().collect()}
        assert got == {("pod-a", "push"): 40, ("pod-a", "claim"): 10, ("pod-a", "ack"): 10,
                       ("pod-b", "push"): 25, ("pod-b", "claim"): 5, ("pod-b", "ack"): 5,
                       ("pod-c", "push"): 7, ("pod-c", "claim"): 7, ("pod-c", "ack"): 7}
        jobs = events.filter("event = 'push'").select("source", "queue", "id")
        assert jobs.distinct().count() == 72 and jobs.select("id").distinct().count() == 40
        segments = sum(len([n for n in os.listdir(tmp_path / "pods" / p / "data") if n.endswith(".wal")])
                       for p in pushed)
        assert segments > 3 and events.rdd.getNumPartitions() == segments          # one per segment
    named = (spark.read.format("leaseq-log").option("sourcePattern", r"pod-(\w)/data")
             .load(str(tmp_path / "pods" / "*" / "data")))
    assert sorted(r.source for r in named.select("source").distinct().collect()) == ["a", "b", "c"]
    whole = (spark.read.format("leaseq-log").option("sourcePattern", "pods")
             .load(str(tmp_path / "pods" / "*" / "data")))                         # no group: the match
    assert [r.source for r in whole.select("source").distinct().collect()] == ["pods"]


def test_bad_paths_and_patterns_are_named(spark, tmp_path):
    (tmp_path / "pods" / "a" / "data").mkdir(parents=True)
    with pytest.raises(Exception) as e:
        read(spark, tmp_path / "nowhere" / "*" / "data").count()
    assert "matches no directory" in str(e.value)
    for pattern, says in (("zzz(", "is not a regular expression"), ("nomatch", "does not match"),
                          ("()", "finds an empty name")):
        with pytest.raises(Exception) as e:
            (spark.read.format("leaseq-log").option("sourcePattern", pattern)
             .load(str(tmp_path / "pods" / "*" / "data")).count())
        assert says in str(e.value), pattern
