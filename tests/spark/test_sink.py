"""The ``leaseq`` data source (leaseq.pipeline.sink) writing into a real
daemon: batch and streaming, keys that make retries and re-runs idempotent,
priority and delay columns, and the daemon's errors in the task's failure."""

from __future__ import annotations

import json

import pytest
import redis

from harness import Daemon, as_map, free_port, qinfo, unique, wait_for


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(str(tmp_path_factory.mktemp("spark") / "data")).start()
    yield d
    d.stop()


@pytest.fixture
def c(daemon):
    return daemon.client()


def url(daemon) -> str:
    return f"redis://127.0.0.1:{daemon.port}/0"


def save(df, daemon, queue, **options):
    w = df.write.format("leaseq").option("url", url(daemon)).option("queue", queue).mode("append")
    for k, v in options.items():
        w = w.option(k, v)
    w.save()


def numbered(spark, n, partitions=2, fail_at=None):
    """Rows (payload "job-i", key "k-i"); row ``fail_at`` raises on the
    first attempt of its task, after the rows before it went out."""
    def row(i):
        if i == fail_at:
            from pyspark import TaskContext
            if TaskContext.get().attemptNumber() == 0:
                raise RuntimeError("injected failure on the first attempt")
        return (f"job-{i}", f"k-{i}", i % 10)
    rdd = spark.sparkContext.parallelize(range(n), partitions).map(row)
    return spark.createDataFrame(rdd, "payload string, key string, prio int")


def payloads(c, queue) -> list[bytes]:
    out, cursor = [], "0"
    while True:
        cursor, jobs = c.execute_command("QSCAN", queue, cursor, "COUNT", 1000)
        out += [as_map(j)[b"payload"] for j in jobs]
        if cursor in (b"0", 0, "0"):
            return out


def test_rows_become_jobs(spark, daemon, c):
    q = unique("plain")
    save(numbered(spark, 1000), daemon, q)
    got = payloads(c, q)
    assert sorted(got) == sorted(b"job-%d" % i for i in range(1000))


# Rows reach the writer's Python worker in chunks (Arrow batches of up to
# 10,000 rows), so a failure upstream in the same task must come well into a
# large partition for the first attempt to have pushed something already.
N, FAIL_AT = 60_000, 55_000          # partitions of 30,000 rows: the second fails 25,000 rows in


def test_a_retried_task_with_a_key_column_creates_no_duplicate(spark, daemon, c):
    q = unique("keyed-retry")
    save(numbered(spark, N, fail_at=FAIL_AT), daemon, q, keyColumn="key")
    info = qinfo(c, q, str_keys=True)
    assert info["ready"] == N and sorted(payloads(c, q)) == sorted(b"job-%d" % i for i in range(N))
    # the first attempt of the second partition had pushed these before it failed
    assert 0 < info["duplicates"] <= FAIL_AT - N // 2


def test_a_retried_task_without_a_key_delivers_at_least_once(spark, daemon, c):
    q = unique("unkeyed-retry")
    save(numbered(spark, N, fail_at=FAIL_AT), daemon, q)
    got = payloads(c, q)
    assert set(got) == {b"job-%d" % i for i in range(N)}
    assert N < len(got) <= N + FAIL_AT - N // 2


def test_a_full_rerun_with_a_key_column_creates_no_duplicate(spark, daemon, c):
    q = unique("rerun")
    df = numbered(spark, 500)
    save(df, daemon, q, keyColumn="key")
    c.execute_command("QCLAIM", q, "w", "COUNT", 100)       # some in flight: still held in scope exists
    save(df, daemon, q, keyColumn="key")
    info = qinfo(c, q, str_keys=True)
    assert info["ready"] + info["in_flight"] == 500 and info["duplicates"] == 500
    assert info["pushed"] == 500


def test_priority_and_delay_columns(spark, daemon, c):
    q = unique("prio")
    save(numbered(spark, 30, partitions=1), daemon, q, priorityColumn="prio")
    first = [as_map(j)[b"priority"] for j in c.execute_command("QCLAIM", q, "w", "COUNT", 30)]
    assert first == sorted(first, reverse=True) and first[0] == 9 and first[-1] == 0
    d = unique("delay")
    df = spark.createDataFrame([("a", 60_000), ("b", 0)], "payload string, wait long")
    save(df, daemon, d, delayColumn="wait")
    info = qinfo(c, d, str_keys=True)
    assert (info["ready"], info["delayed"]) == (1, 1)


def test_binary_payloads_and_json_rows(spark, daemon, c):
    q = unique("bin")
    df = spark.createDataFrame([(bytearray(b"\x00\xff\x10"),)], "payload binary")
    save(df, daemon, q)
    assert payloads(c, q) == [b"\x00\xff\x10"]
    j = unique("json")
    df = spark.createDataFrame([(7, "x", None)], "id long, name string, note string")
    save(df, daemon, j, payloadFormat="json")
    assert json.loads(payloads(c, j)[0]) == {"id": 7, "name": "x", "note": None}


def test_a_daemon_error_fails_the_task_with_the_daemons_message(spark, daemon, c):
    q = unique("full")
    c.execute_command("QCREATE", q, "MAXLEN", 5)
    with pytest.raises(Exception) as e:
        save(numbered(spark, 20, partitions=1), daemon, q)
    assert f"refused a push into queue '{q}': FULL queue '{q}' is at MAXLEN" in str(e.value)


def test_an_unreachable_daemon_fails_the_task(spark):
    df = spark.createDataFrame([("a",)], "payload string")
    port = free_port()
    with pytest.raises(Exception) as e:
        (df.write.format("leaseq").option("url", f"redis://u:secret@127.0.0.1:{port}/0").option("queue", "q")
         .mode("append").save())
    text = str(e.value)
    assert f"cannot push to leaseq at redis://127.0.0.1:{port}/0" in text and "secret" not in text.split(
        "cannot push")[1][:200]


@pytest.mark.parametrize("options, message", [
    ({}, "the leaseq data source needs the option 'queue'"),
    ({"queue": "q", "keyColumn": "nope"}, "keyColumn 'nope' is not a column of the DataFrame"),
    ({"queue": "q", "keyScope": "forever"}, "keyScope must be one of queued, active, exists"),
    ({"queue": "q", "batchSize": "0"}, "batchSize must be between 1 and 100000"),
    ({"queue": "q", "payloadFormat": "xml"}, "payloadFormat must be raw or json"),
])
def test_bad_options_are_refused_before_anything_is_pushed(spark, daemon, options, message):
    df = spark.createDataFrame([("a",)], "payload string")
    w = df.write.format("leaseq").option("url", url(daemon)).mode("append")
    for k, v in options.items():
        w = w.option(k, v)
    with pytest.raises(Exception) as e:
        w.save()
    assert message in str(e.value)


def test_the_streaming_sink(spark, daemon, c, tmp_path):
    q = unique("stream")
    c.execute_command("QCREATE", q)
    stream = (spark.readStream.format("rate").option("rowsPerSecond", 20).load()
              .selectExpr("concat('tick-', cast(value as string)) as payload", "cast(value as string) as key")
              .writeStream.format("leaseq").option("url", url(daemon)).option("queue", q)
              .option("keyColumn", "key").option("checkpointLocation", str(tmp_path / "checkpoint"))
              .trigger(processingTime="500 milliseconds").start())
    try:
        wait_for(lambda: stream.exception() is None and c.execute_command("QLEN", q) >= 20, 60, "20 jobs")
    finally:
        stream.stop()
    got = payloads(c, q)
    assert len(got) == len(set(got)) >= 20 and all(p.startswith(b"tick-") for p in got)


def refuses_with_oom(c) -> bool:
    """Whether a push to a queue of its own is refused with -OOM now."""
    try:
        c.execute_command("QPUSH", "oom-probe", "x")
    except redis.exceptions.OutOfMemoryError:          # redis-py's class for -OOM
        return True
    return False


@pytest.fixture
def debug_daemon(tmp_path):
    d = Daemon(str(tmp_path / "data"), env={"LEASEQ_ENABLE_DEBUG_COMMAND": "yes"}).start()
    yield d
    d.stop()


@pytest.mark.parametrize("how, expected", [
    (("CONFIG", "SET", "max-payload", "3"), "TOOBIG payload of 5 bytes exceeds max-payload"),
    (("CONFIG", "SET", "maxmemory", "1"), "OOM command not allowed when used memory > 'maxmemory'"),
    (("DEBUG", "FAULT", "WRITE", "ENOSPC"), "MISCONF leaseq cannot write its log (No space left on device)"),
])
def test_each_daemon_refusal_reaches_the_task_with_its_message(spark, debug_daemon, how, expected):
    c = debug_daemon.client()
    c.execute_command("QCREATE", "q")
    c.execute_command(*how)
    if how[2] == "maxmemory":                        # the daemon samples its memory every 100 ms
        wait_for(lambda: refuses_with_oom(c), 10, "the daemon refusing pushes with -OOM")
    df = spark.createDataFrame([("job-1",)], "payload string")
    with pytest.raises(Exception) as e:
        save(df, debug_daemon, "q")
    assert expected in str(e.value)
