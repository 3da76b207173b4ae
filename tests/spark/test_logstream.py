"""``spark.readStream.format("leaseq-log")`` (leaseq.pipeline.logstream):
real daemons write while a query reads; the query is stopped and started
again from its checkpoint across segment rotation, compaction into
archive-dir and a kill -9 with a torn tail, and what its file sink holds is
the batch read of the same directories, event for event: none missing,
none twice."""

from __future__ import annotations

import json
import os
import pathlib
import re
import time
from collections import Counter

import pytest

from harness import Daemon, as_map, bgsave
from harness_disk import write_segment, write_torn

from leaseq.pipeline.logsource import SCHEMA
from leaseq.storage import records
from leaseq.storage.job import Job

TRIGGER = "300 milliseconds"


def token(reply) -> bytes:
    return as_map(reply[0])[b"lease"]


def work(c, n: int, acks: int, queue: str = "jobs") -> None:
    c.execute_command("QPUSHMANY", queue, n, *[b"x" * 300] * n)
    for _ in range(acks):
        c.execute_command("QACK", queue, token(c.execute_command("QCLAIM", queue, "w", "LEASE", 60_000)))


def pod(tmp_path, name: str) -> Daemon:
    base = tmp_path / "pods" / name
    (base / "archive").mkdir(parents=True)
    d = Daemon(str(base / "data"), "--segment-size", "4096").start()
    d.client().config_set("archive-dir", str(base / "archive"))
    return d


def paths(tmp_path) -> str:
    return f"{tmp_path}/pods/*/data,{tmp_path}/pods/*/archive"


def start(spark, tmp_path, **options):
    reader = spark.readStream.format("leaseq-log")
    for k, v in options.items():
        reader = reader.option(k, v)
    return (reader.load(paths(tmp_path)).writeStream.format("parquet")
            .option("path", str(tmp_path / "out")).option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(processingTime=TRIGGER).start())


def kinds(rows) -> Counter:
    """(source, event) -> how many, of rows or of a Counter of row tuples."""
    out: Counter = Counter()
    for row, n in (rows.items() if isinstance(rows, Counter) else ((r, 1) for r in rows)):
        out[(row[9], row[2])] += n
    return out


def full(rows) -> Counter:
    return Counter(tuple(r) for r in rows)


def batch(spark, tmp_path):
    return spark.read.format("leaseq-log").load(paths(tmp_path)).collect()


def emitted(spark, tmp_path):
    if not (tmp_path / "out" / "_spark_metadata").exists():
        return []
    return spark.read.schema(SCHEMA).parquet(str(tmp_path / "out")).collect()


def caught_up(spark, tmp_path, query, timeout: float = 60.0):
    """Poll until the sink holds exactly the batch read (or the deadline)."""
    want = full(batch(spark, tmp_path))
    deadline = time.monotonic() + timeout
    while True:
        assert query.exception() is None, query.exception()
        got = full(emitted(spark, tmp_path))
        if got == want or time.monotonic() > deadline:
            return got, want
        time.sleep(0.5)


def newest_segment(directory) -> str:
    return os.path.join(directory, max(n for n in os.listdir(directory) if n.endswith(".wal")))


def push_frame(queue_id: int, job_id: int) -> bytes:
    """A whole PUSH record of one job, as the daemon would write it."""
    body = records.push(queue_id, int(time.time() * 1000), [Job(job_id, b"torn", 5, 0, 0)])
    return records.frame(records.PUSH, body)


def queue_id(data_dir, name: bytes) -> int:
    for n in sorted(os.listdir(data_dir)):
        if n.endswith(".wal"):
            with open(os.path.join(data_dir, n), "rb") as f:
                data = f.read()
            for _off, rtype, body in records.iter_frames(data, records.SEGMENT_HEADER_SIZE):
                if rtype == records.QUEUE and records.decode(rtype, body)[2] == name:
                    return records.decode(rtype, body)[0]
    raise AssertionError(f"no QUEUE record for {name!r}")


def test_a_restarted_query_emits_every_event_exactly_once(spark, tmp_path):
    a, b = pod(tmp_path, "pod-a"), pod(tmp_path, "pod-b")
    try:
        work(a.client(), 60, 20)
        work(b.client(), 30, 10)
        q = start(spark, tmp_path)
        try:
            got, want = caught_up(spark, tmp_path, q)
            assert got == want and kinds(want)[("pod-a", "push")] == 60
            work(a.client(), 40, 40)                    # while it runs
            got, want = caught_up(spark, tmp_path, q)
            assert got == want
        finally:
            q.stop()
        before = kinds(emitted(spark, tmp_path))
        assert before == {("pod-a", "push"): 100, ("pod-a", "claim"): 60, ("pod-a", "ack"): 60,
                          ("pod-b", "push"): 30, ("pod-b", "claim"): 10, ("pod-b", "ack"): 10}

        # stopped: rotation and compaction into archive-dir in pod-a ...
        ca = a.client()
        for _ in range(2):
            work(ca, 50, 30)
            bgsave(ca)
        archived = os.listdir(tmp_path / "pods" / "pod-a" / "archive")
        assert archived                                   # segments the query had read, and ones it had not
        # ... and pod-b killed with half a record at the end of its log
        work(b.client(), 20, 5)
        b.kill()
        newest = newest_segment(b.data_dir)
        torn = push_frame(queue_id(b.data_dir, b"jobs"), 51)
        at = write_torn(newest, torn[:len(torn) // 2])

        q = start(spark, tmp_path)                        # the same checkpoint
        try:
            got, want = caught_up(spark, tmp_path, q)
            assert got == want                            # the half record is in neither
            assert kinds(got)[("pod-b", "push")] == 50
            with open(newest, "r+b") as f:                # the write completes: a whole record now
                f.seek(at + len(torn) // 2)
                f.write(torn[len(torn) // 2:])
            got, want = caught_up(spark, tmp_path, q)
            assert got == want and kinds(got)[("pod-b", "push")] == 51
            b.restart()                                   # recovery keeps it; a new segment follows
            work(b.client(), 10, 10)
            work(a.client(), 10, 10)
            got, want = caught_up(spark, tmp_path, q)
            assert got == want
        finally:
            q.stop()
        after = kinds(got)
        assert after == {("pod-a", "push"): 210, ("pod-a", "claim"): 130, ("pod-a", "ack"): 130,
                         ("pod-b", "push"): 61, ("pod-b", "claim"): 25, ("pod-b", "ack"): 25}
        assert all(after[k] >= before[k] for k in before)
        # a third start with nothing new re-emits nothing
        q = start(spark, tmp_path)
        try:
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                assert q.exception() is None
                time.sleep(0.5)
        finally:
            q.stop()
        assert full(emitted(spark, tmp_path)) == full(batch(spark, tmp_path))
        offsets = sorted((p for p in (tmp_path / "ck" / "offsets").iterdir() if p.name.isdigit()),
                         key=lambda p: int(p.name))
        last = json.loads(offsets[-1].read_text().splitlines()[-1])
        assert sorted(last["sources"]) == ["pod-a", "pod-b"] and last["v"] == 1
    finally:
        a.kill()
        b.kill()


def test_latest_starts_after_what_is_there_and_new_pods_join(spark, tmp_path):
    a = pod(tmp_path, "pod-a")
    b = None
    try:
        work(a.client(), 20, 0)
        q = start(spark, tmp_path, startingOffsets="latest")
        try:
            # "latest" is taken at the query's first trigger, which a loaded machine may run late:
            # write the new work only once a trigger has run
            deadline = time.monotonic() + 60
            while q.status["message"] != "Waiting for next trigger":
                assert q.exception() is None and time.monotonic() < deadline, q.status
                time.sleep(0.1)
            work(a.client(), 5, 0)
            b = pod(tmp_path, "pod-b")                   # a new pod: the glob finds it
            work(b.client(), 7, 0)
            deadline = time.monotonic() + 30
            while kinds(emitted(spark, tmp_path)) != {("pod-a", "push"): 5, ("pod-b", "push"): 7}:
                assert q.exception() is None and time.monotonic() < deadline, kinds(emitted(spark, tmp_path))
                time.sleep(0.5)
        finally:
            q.stop()
    finally:
        a.kill()
        if b is not None:
            b.kill()


def test_a_segment_compaction_deleted_before_the_stream_read_it_is_an_error(spark, tmp_path):
    base = tmp_path / "pods" / "pod-a"
    base.mkdir(parents=True)
    a = Daemon(str(base / "data"), "--segment-size", "4096").start()     # no archive-dir: compaction deletes
    try:
        work(a.client(), 30, 0)
        q = (spark.readStream.format("leaseq-log").load(str(tmp_path / "pods" / "*" / "data"))
             .writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime=TRIGGER).start())
        deadline = time.monotonic() + 30
        while len(emitted(spark, tmp_path)) < 30:
            assert q.exception() is None and time.monotonic() < deadline
            time.sleep(0.3)
        q.stop()
        c = a.client()
        for _ in range(2):                      # the second snapshot's compaction deletes what the first covers
            work(c, 30, 0)
            bgsave(c)
        assert "seg-00000000000000000001.wal" not in os.listdir(base / "data")
        q = (spark.readStream.format("leaseq-log").load(str(tmp_path / "pods" / "*" / "data"))
             .writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime=TRIGGER).start())
        with pytest.raises(Exception) as e:
            assert not q.awaitTermination(60), "the query still runs"
        assert "of source 'pod-a' is in none of" in str(e.value) and "archive-dir" in str(e.value)
        assert len(emitted(spark, tmp_path)) == 30                    # nothing skipped silently
    finally:
        a.kill()


def test_a_bad_starting_offset_is_refused(spark, tmp_path):
    (tmp_path / "pods" / "a" / "data").mkdir(parents=True)
    with pytest.raises(Exception) as e:
        q = (spark.readStream.format("leaseq-log").option("startingOffsets", "yesterday")
             .load(str(tmp_path / "pods" / "*" / "data")).writeStream.format("memory").queryName("bad_start")
             .start())
        q.awaitTermination(30)
    assert "startingOffsets must be earliest or latest" in str(e.value)


SPARK_MD = pathlib.Path(__file__).resolve().parents[2] / "docs" / "spark.md"
NEW_YEAR_2030 = 1_893_456_000_000          # 2030-01-01 00:00:00 UTC, ms


def doc_example() -> tuple[str, str]:
    """docs/spark.md's dead-letter example: its code and the block after "prints:"."""
    section = SPARK_MD.read_text(encoding="utf-8").split(
        "### Example: dead letters per minute and queue, across pods\n", 1)[1].split("\n### ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    printed = re.search(r"prints:\n\n```\n(.*?)```", section, re.DOTALL).group(1)
    return code, printed


def test_the_dead_letter_example_of_the_docs_prints_what_they_say(spark, tmp_path, monkeypatch, capsys):
    """Two pods on clocks frozen at 2030-01-01 00:00 UTC: jobs die (QNACK
    DEAD) in minute 0 and minute 1; the example runs in its own Python as
    written (in this process: its getOrCreate finds the tests' session),
    pointed at them by LEASEQ_PODS."""
    died = {"pod-a": [("orders", 0), ("orders", 0), ("emails", 0), ("orders", 1)],
            "pod-b": [("orders", 0), ("emails", 1), ("emails", 1)]}
    for name, deaths in died.items():
        (tmp_path / name).mkdir()
        d = Daemon(str(tmp_path / name / "data"), env={"LEASEQ_ENABLE_DEBUG_COMMAND": "yes"}).start()
        try:
            c = d.client()
            c.execute_command("DEBUG", "CLOCK", "FREEZE", NEW_YEAR_2030)
            at = 0
            for queue, minute in deaths:
                if minute * 60_000 + 1000 > at:
                    c.execute_command("DEBUG", "CLOCK", "ADVANCE", minute * 60_000 + 1000 - at)
                    at = minute * 60_000 + 1000
                c.execute_command("QPUSH", queue, "x")
                c.execute_command("QPUSH", queue, "kept")                       # claimed, acked: not dead
                c.execute_command("QACK", queue, token(c.execute_command("QCLAIM", queue, "w", "LEASE", 60_000)))
                c.execute_command("QNACK", queue, token(c.execute_command("QCLAIM", queue, "w", "LEASE", 60_000)),
                                  "DEAD", "ERROR", "bad")
        finally:
            d.stop()
    code, printed = doc_example()
    monkeypatch.setenv("LEASEQ_PODS", str(tmp_path))
    zone = spark.conf.get("spark.sql.session.timeZone")
    capsys.readouterr()
    try:
        exec(compile(code, "docs/spark.md", "exec"), {"__name__": "__main__"})    # noqa: S102 (the docs are the test)
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
        spark.sparkContext.setLogLevel("OFF")
    assert capsys.readouterr().out.strip() == printed.strip()


def test_a_damaged_segment_stops_the_stream_naming_it(spark, tmp_path):
    """Bytes that are not records at the end of a segment two before the
    newest: not a torn tail, damage; the query fails naming source, file
    and offset, as the batch read does."""
    base = tmp_path / "pods" / "pod-a"
    base.mkdir(parents=True)
    d = Daemon(str(base / "data")).start()
    d.client().execute_command("QPUSHMANY", "q", 3, "a", "b", "c")
    d.stop()
    first = newest_segment(d.data_dir)
    size = os.path.getsize(first)
    with open(first, "ab") as f:
        f.write(b"\x01\x02\x03 not a record")
    number = int(os.path.basename(first)[4:24])
    write_segment(d.data_dir, number + 1, b"")
    write_segment(d.data_dir, number + 2, b"")
    q = (spark.readStream.format("leaseq-log").load(str(tmp_path / "pods" / "*" / "data"))
         .writeStream.format("parquet").option("path", str(tmp_path / "out"))
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime=TRIGGER).start())
    with pytest.raises(Exception) as e:
        assert not q.awaitTermination(60), "the query still runs"
    assert f"pod-a: {os.path.basename(first)} at offset {size}: a record fails its checksum" in str(e.value)


def test_an_offset_of_something_else_is_refused(tmp_path):
    """The reader itself (no query): a checkpoint's offset in another shape."""
    from leaseq.pipeline.logsource import LogError
    from leaseq.pipeline.logstream import LogStreamReader

    (tmp_path / "pods" / "a" / "data").mkdir(parents=True)
    reader = LogStreamReader({"path": str(tmp_path / "pods" / "*" / "data")})
    good = reader.initialOffset()
    assert good == {"v": 1, "sources": {"a": [0, 0]}}
    for bad in ({"offset": 5}, {"v": 2, "sources": {}}, [1, 2]):
        with pytest.raises(LogError, match="not an offset of this source"):
            reader.partitions(bad, good)
    # a log that starts over below the checkpoint's offset (a replica's full sync)
    write_segment(tmp_path / "pods" / "a" / "data", 5, b"")
    with pytest.raises(LogError, match="the log of source 'a' starts over below the stream's offset"):
        reader.latestOffset({"v": 1, "sources": {"a": [9, 24]}}, None)
    assert reader.latestOffset({"v": 1, "sources": {"a": [5, 24]}}, None)["sources"]["a"] == [5, 24]
    # a source the paths no longer give keeps its place, and has nothing to read
    gone = {"v": 1, "sources": {"a": [5, 24], "old-pod": [4, 100]}}
    assert reader.latestOffset(gone, None)["sources"]["old-pod"] == [4, 100]
    assert reader.partitions(gone, gone) == []
