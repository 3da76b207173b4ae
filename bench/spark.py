"""``leaseq bench spark``: the write side, rows per second from Spark into
the daemon with the ``leaseq`` data source, without and with a key column,
and the duplicate jobs left by a forced task retry and by a full re-run of
a keyed write; and the read side (``leaseq-log``), events per second of a
batch read and of a streaming read of many sources, a live stream's
latency and what its restart from the checkpoint emits again.

It starts its own daemon (``bench.common.Daemon``) and a local SparkSession
(``local[2,3]``: a task that fails is tried again).  Rows carry a 128-byte
payload and a key, in two partitions, cached before timing so that only the
write is measured.  The forced retry fails the second partition on its
first attempt, 90% of the way through the rows, after its first batches
went out; the keyed write must still leave exactly one job per row.

The read side (``run_read``): one daemon (durability async) pushes, claims
and acks ``jobs`` jobs (64-byte payloads, in batches of 1,000), three
events each; its data directory is copied to make ``sources`` pods
(``pods/pod-N/data``: the same log, read as that many sources).  Then, on
``local[2]``:

- batch: ``spark.read.format("leaseq-log").load("pods/*/data")`` counted
  per source and event (each segment a partition);
- stream: the same paths read from the earliest offset by a streaming query
  (``noop`` sink, ``availableNow``) until it has them all;
- latency: a live daemon gets one QPUSH every 50 ms for ``live_seconds``; a
  query with a 1 s trigger collects each batch on the driver
  (``foreachBatch``); an event's latency is the moment its batch reached
  the driver minus the ``ts`` the daemon wrote;
- restart: that query is stopped once it has every event and started again
  from its checkpoint with nothing new written.  The sink keeps each
  batch's rows by batch id (a batch Spark runs again, because the stop came
  before its commit, replaces itself: what an exactly-once sink does); the
  new events the second run emits are counted (there should be none), a
  batch run again must hold the same events, and everything is compared
  with a batch read (missing, twice).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

from .common import Daemon, print_table, publish, progress

PAYLOAD = 128
DEFAULT_ROWS = 1_000_000
QUICK_ROWS = 100_000
PARTITIONS = 2


def failing_once(fail_at: int):
    """A row maker that raises on the first attempt of the task holding
    row ``fail_at`` (module level, so Spark's workers import it)."""
    def row(i: int):
        if i == fail_at:
            from pyspark import TaskContext
            if TaskContext.get().attemptNumber() == 0:
                raise RuntimeError("bench: injected failure on the first attempt")
        return (b"%0*d" % (PAYLOAD, i), str(i))
    return row


READ_SOURCES = 10
READ_JOBS = 200_000
QUICK_READ_JOBS = 20_000
LIVE_SECONDS = 20
LIVE_EVERY = 0.05


def session(master: str = f"local[{PARTITIONS},3]"):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from leaseq.pipeline import register

    spark = (SparkSession.builder.master(master).appName("leaseq-bench-spark")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "1g").getOrCreate())
    spark.sparkContext.setLogLevel("OFF")
    register(spark)
    return spark


def run(rows: int, json_path: str | None, say=None, side: str = "both", sources: int = READ_SOURCES,
        jobs: int = READ_JOBS, live_seconds: float = LIVE_SECONDS) -> dict:
    """The write side, the read side or both (one JSON, one table each)."""
    result: dict = {}
    if side in ("write", "both"):
        result["write"] = run_write(rows, say)
    if side in ("read", "both"):
        result["read"] = run_read(sources, jobs, live_seconds, say)
    return publish(result, report, json_path)


def run_write(rows: int, say=None) -> dict:
    say = say or progress
    work = tempfile.mkdtemp(prefix="leaseq-bench-spark-")
    daemon = Daemon(os.path.join(work, "data"), os.path.join(work, "daemon.log"))
    spark = None
    try:
        daemon.start()
        client = daemon.client()
        url = f"redis://127.0.0.1:{daemon.port}/0"
        say("starting Spark")
        spark = session()
        schema = "payload binary, key string"
        plain = spark.createDataFrame(
            spark.sparkContext.parallelize(range(rows), PARTITIONS).map(failing_once(-1)), schema).cache()
        plain.count()

        def write(df, queue: str, keyed: bool) -> float:
            w = df.write.format("leaseq").option("url", url).option("queue", queue).mode("append")
            if keyed:
                w = w.option("keyColumn", "key")
            t0 = time.monotonic()
            w.save()
            return time.monotonic() - t0

        def jobs(queue: str) -> dict:
            reply = client.execute_command("QINFO", queue)
            info = reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2]))
            return {"jobs": info[b"ready"] + info[b"delayed"] + info[b"in_flight"],
                    "found_by_key": info[b"duplicates"]}

        say("warming up (Python workers, the first connection)")
        write(plain.limit(10_000), "warmup", True)
        result: dict = {"settings": {"rows": rows, "payload_bytes": PAYLOAD, "partitions": PARTITIONS,
                                     "batch_size": 500, "master": f"local[{PARTITIONS},3]"}}
        say(f"writing {rows:,} rows without a key")
        seconds = write(plain, "plain", False)
        result["no_key"] = {"seconds": seconds, "rows_per_s": rows / seconds, **jobs("plain")}
        say(f"writing {rows:,} rows with a key column")
        seconds = write(plain, "keyed", True)
        result["keyed"] = {"seconds": seconds, "rows_per_s": rows / seconds, **jobs("keyed")}
        say("a keyed write whose second partition fails once, 90% through")
        failing = spark.createDataFrame(
            spark.sparkContext.parallelize(range(rows), PARTITIONS).map(failing_once(rows * 9 // 10)), schema)
        seconds = write(failing, "retried", True)
        got = jobs("retried")
        result["forced_retry"] = {"seconds": seconds, **got, "duplicate_jobs": got["jobs"] - rows}
        say("the same keyed write again, whole")
        seconds = write(plain, "retried", True)
        again = jobs("retried")
        result["rerun"] = {"seconds": seconds, "rows_per_s": rows / seconds, "jobs": again["jobs"],
                           "duplicate_jobs": again["jobs"] - rows,
                           "found_by_key": again["found_by_key"] - got["found_by_key"]}
    finally:
        if spark is not None:
            spark.stop()
        daemon.kill()
        shutil.rmtree(work, ignore_errors=True)
    return result


def report(r: dict) -> None:
    if "write" in r:
        report_write(r["write"])
    if "read" in r:
        report_read(r["read"])


def report_write(r: dict) -> None:
    n = r["settings"]["rows"]
    f, k, x = r["forced_retry"], r["rerun"], r["keyed"]
    print_table(f"leaseq bench spark: {n:,} rows of {PAYLOAD} bytes in {PARTITIONS} partitions, "
                f"{r['settings']['master']}", [
        ("write without a key", r["no_key"]["rows_per_s"], "rows/s", ""),
        ("write with a key column", x["rows_per_s"], "rows/s", ">= 50,000 rows/s"),
        ("  jobs created", x["jobs"], "jobs", f"{n:,}"),
        ("forced task retry (keyed): time", f["seconds"], "s", ""),
        ("  rows pushed twice, found by key", f["found_by_key"], "rows", ""),
        ("  duplicate jobs", f["duplicate_jobs"], "jobs", "0"),
        ("full re-run (keyed)", k["rows_per_s"], "rows/s", ""),
        ("  rows found by key", k["found_by_key"], "rows", f"{n:,}"),
        ("  duplicate jobs", k["duplicate_jobs"], "jobs", "0"),
    ], baseline="target")


# -- the read side -----------------------------------------------------------------------------------

def _make_log(client, jobs: int) -> None:
    """Push, claim and ack ``jobs`` jobs, 1,000 at a time."""
    batch = 1000
    done = 0
    while done < jobs:
        n = min(batch, jobs - done)
        client.execute_command("QPUSHMANY", "bench", n, *[b"p" * 64] * n)
        claimed = client.execute_command("QCLAIM", "bench", "w", "COUNT", n, "LEASE", 600_000)
        tokens = [_field(j, b"lease") for j in claimed]
        client.execute_command("QACK", "bench", *tokens)
        done += n


def _field(reply, name: bytes):
    info = reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2]))
    return info[name]


def run_read(sources: int, jobs: int, live_seconds: float, say=None) -> dict:
    say = say or progress
    work = tempfile.mkdtemp(prefix="leaseq-bench-spark-read-")
    spark = None
    live = None
    try:
        pods = os.path.join(work, "pods")
        first = os.path.join(pods, "pod-0", "data")
        os.makedirs(os.path.dirname(first))
        say(f"writing a log of {jobs:,} jobs (push, claim, ack)")
        daemon = Daemon(first, os.path.join(work, "daemon.log"), args=("--default-durability", "async"))
        daemon.start()
        try:
            _make_log(daemon.client(), jobs)
        finally:
            daemon.stop()
        for i in range(1, sources):
            shutil.copytree(first, os.path.join(pods, f"pod-{i}", "data"), ignore=shutil.ignore_patterns("LOCK"))
        say("starting Spark (local[2])")
        spark = session("local[2]")
        from pyspark.sql import functions as F

        paths = os.path.join(pods, "*", "data")
        result: dict = {"settings": {"sources": sources, "jobs_per_source": jobs, "master": "local[2]",
                                     "live_seconds": live_seconds, "live_every_s": LIVE_EVERY}}
        say("warming up (a small batch read)")
        spark.read.format("leaseq-log").load(first).count()

        say(f"batch read of {sources} sources")
        t0 = time.monotonic()
        df = spark.read.format("leaseq-log").load(paths)
        counts = df.groupBy("source", "event").count().collect()
        seconds = time.monotonic() - t0
        events = sum(r["count"] for r in counts)
        result["batch"] = {"seconds": seconds, "events": events, "events_per_s": events / seconds,
                           "partitions": df.rdd.getNumPartitions()}

        say(f"streaming read of {sources} sources, from the earliest offset")
        t0 = time.monotonic()
        q = (spark.readStream.format("leaseq-log").load(paths).writeStream.format("noop")
             .option("checkpointLocation", os.path.join(work, "ck-noop")).trigger(availableNow=True).start())
        q.awaitTermination(3600)
        seconds = time.monotonic() - t0
        streamed = sum(p["numInputRows"] for p in q.recentProgress)
        result["stream"] = {"seconds": seconds, "events": streamed, "events_per_s": streamed / seconds,
                            "batches": len(q.recentProgress)}

        say(f"a live daemon, one push every {LIVE_EVERY * 1000:.0f} ms for {live_seconds:.0f} s, a 1 s trigger")
        live_dir = os.path.join(work, "live", "pod-live", "data")
        os.makedirs(os.path.dirname(live_dir))
        live = Daemon(live_dir, os.path.join(work, "live.log"))
        live.start()
        client = live.client()
        client.execute_command("QPUSH", "live", "first")        # the queue exists before the stream starts
        # the sink: rows by batch id, a batch run again replacing itself (what
        # an exactly-once sink does with foreachBatch's id)
        batches: dict = {}
        arrivals: list = []                 # (ts ms, when the batch reached the driver ms), first runs only

        def collect(batch, batch_id):
            got = [r["ms"] for r in batch.select(F.unix_millis("ts").alias("ms")).collect()]
            now = time.time() * 1000
            if batch_id in batches:
                replayed.append((batch_id, got == batches[batch_id]))
            else:
                arrivals.extend((ms, now) for ms in got)
            batches[batch_id] = got

        def emitted() -> int:
            return sum(len(v) for v in batches.values())

        def start():
            return (spark.readStream.format("leaseq-log").load(live_dir).writeStream.foreachBatch(collect)
                    .option("checkpointLocation", os.path.join(work, "ck-live"))
                    .trigger(processingTime="1 second").start())

        replayed: list = []
        q = start()
        deadline = time.monotonic() + 60
        while not emitted() and time.monotonic() < deadline:     # the first batch: the job pushed before
            time.sleep(0.1)
        warm = len(arrivals)
        pushed = 0
        end = time.monotonic() + live_seconds
        while time.monotonic() < end:
            client.execute_command("QPUSH", "live", "x")
            pushed += 1
            time.sleep(LIVE_EVERY)
        truth = spark.read.format("leaseq-log").load(live_dir).count()
        deadline = time.monotonic() + 60
        while emitted() < truth and time.monotonic() < deadline:
            time.sleep(0.1)
        q.stop()
        lat = sorted((now - ms) / 1000 for ms, now in arrivals[warm:])
        first_run, first_batches = emitted(), set(batches)
        say("the same query again from its checkpoint, nothing new written")
        q = start()
        time.sleep(5)
        q.stop()
        new_events = sum(len(v) for k, v in batches.items() if k not in first_batches)
        result["latency"] = {"events": len(lat), "median_s": _pct(lat, 0.5), "p90_s": _pct(lat, 0.9),
                             "max_s": lat[-1] if lat else None}
        result["restart"] = {"emitted_before": first_run, "emitted_after_restart": new_events,
                             "batches_run_again": len(replayed),
                             "run_again_differently": sum(1 for _b, same in replayed if not same),
                             "batch_read": truth, "missing": max(0, truth - emitted()),
                             "twice": max(0, emitted() - truth)}
    finally:
        if spark is not None:
            spark.stop()
        if live is not None:
            live.kill()
        shutil.rmtree(work, ignore_errors=True)
    return result


def _pct(values: list, p: float):
    if not values:
        return None
    return values[min(len(values) - 1, int(p * len(values)))]


def report_read(r: dict) -> None:
    s = r["settings"]
    b, st, lat, re_ = r["batch"], r["stream"], r["latency"], r["restart"]
    print_table(f"leaseq bench spark, read side: {s['sources']} sources x {s['jobs_per_source']:,} jobs "
                f"(push, claim, ack), {s['master']}", [
        ("batch read", b["events_per_s"], "events/s", ">= 500,000 events/s"),
        ("  events", b["events"], "events", ""),
        ("  input partitions (segments)", b["partitions"], "", ""),
        ("  time", b["seconds"], "s", ""),
        ("streaming read (availableNow)", st["events_per_s"], "events/s", ""),
        ("  events", st["events"], "events", f"{b['events']:,}"),
        ("  time", st["seconds"], "s", ""),
        ("stream latency, median (1 s trigger)", lat["median_s"], "s", "<= 3 s"),
        ("  p90", lat["p90_s"], "s", ""),
        ("  max", lat["max_s"], "s", ""),
        ("  events measured", lat["events"], "events", ""),
        ("restart from checkpoint: new events emitted", re_["emitted_after_restart"], "events", "0"),
        ("  batches run again (unfinished at stop)", re_["batches_run_again"], "batches", ""),
        ("    of those, with other events", re_["run_again_differently"], "batches", "0"),
        ("  missing / twice vs a batch read", f"{re_['missing']} / {re_['twice']}", "events", "0 / 0"),
    ], baseline="target")
