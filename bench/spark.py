"""``leaseq bench spark``: rows per second from Spark into the daemon with the
``leaseq`` data source, without and with a key column, and the duplicate
jobs left by a forced task retry and by a full re-run of a keyed write.

It starts its own daemon (``bench.common.Daemon``) and a local SparkSession
(``local[2,3]``: a task that fails is tried again).  Rows carry a 128-byte
payload and a key, in two partitions, cached before timing so that only the
write is measured.  The forced retry fails the second partition on its
first attempt, 90% of the way through the rows, after its first batches
went out; the keyed write must still leave exactly one job per row.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

from .common import Daemon, print_table, publish

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


def session():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from leaseq.pipeline import register

    spark = (SparkSession.builder.master(f"local[{PARTITIONS},3]").appName("leaseq-bench-spark")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "1g").getOrCreate())
    spark.sparkContext.setLogLevel("OFF")
    register(spark)
    return spark


def run(rows: int, json_path: str | None, say=None) -> dict:
    say = say or (lambda msg: print(f"# {msg}", file=sys.stderr, flush=True))
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
    return publish(result, report, json_path)


def report(r: dict) -> None:
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
