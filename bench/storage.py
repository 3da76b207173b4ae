"""``leaseq bench storage``: what snapshots bought.  Four measurements, each
on daemons this command starts and stops itself (by PID, SIGKILL for the
crashes), 128-byte payloads pushed with QPUSHMANY 1000 in pipelines:

1. Recovery of N live jobs after ``kill -9``: from the log only, then from a
   snapshot (BGSAVE first).  Time from process start until PING answers
   +PONG (the port answers -LOADING meanwhile) and the recovery proper from
   the daemon's "recovered ... in X s" line, with records (or jobs) per second.
2. Memory per live job beyond its payload: (RSS at N jobs - RSS of the empty
   daemon) / N - 128, after pushing and after the restart from the snapshot.
3. Data directory bytes / live bytes after many push/claim/ack cycles with
   2,000 jobs live, with the default snapshot-min-bytes and with 1mb.
4. QPUSH latency on another queue while a snapshot of N jobs is written,
   beside the same length of time without one.

The figures are printed as a table (with the baselines from before snapshots
existed) and optionally written as JSON.  Nothing is asserted.
"""

from __future__ import annotations

import math
import os
import platform
import shutil
import tempfile
import threading
import time

import redis
import redis.utils

from .common import Daemon, dir_bytes, mib, percentile, print_table, publish, wait_snapshot, progress

PAYLOAD = 128
PUSH_BATCH = 1000          # jobs per QPUSHMANY
PIPELINE = 10              # QPUSHMANY commands per pipeline round trip
LIVE = 2000                # jobs live during the churn
CYCLE_BATCH = 100          # jobs per QPUSHMANY / QCLAIM / QACK in the churn
PROBE_INTERVAL = 0.0015    # seconds between two probe QPUSHes
QUEUE = "bench"
PROBE_QUEUE = "bench-probe"

# Measured before snapshots existed (1,000,000 jobs of 128 bytes).
BASELINE = {"log_mib_1m": 156, "restart_seconds_1m": 8.1, "memory_per_job_bytes": 385}

DEFAULT_JOBS = 1_000_000
DEFAULT_CYCLES = 300_000
QUICK_JOBS = 100_000
QUICK_CYCLES = 30_000


def payloads(start: int, count: int) -> list[bytes]:
    """``count`` distinct 128-byte payloads."""
    return [b"job-%0124d" % i for i in range(start, start + count)]


def push(c: redis.Redis, queue: str, n: int) -> float:
    """Push ``n`` jobs with QPUSHMANY 1000, PIPELINE commands per round
    trip; return the seconds taken."""
    t0 = time.perf_counter()
    done = 0
    while done < n:
        pipe = c.pipeline(transaction=False)
        for _ in range(PIPELINE):
            k = min(PUSH_BATCH, n - done)
            if k <= 0:
                break
            pipe.execute_command("QPUSHMANY", queue, k, *payloads(done, k))
            done += k
        pipe.execute()
    return time.perf_counter() - t0


def per_job(rss: int, empty: int, jobs: int) -> float:
    return (rss - empty) / jobs - PAYLOAD if jobs else math.nan


class Probe(threading.Thread):
    """QPUSH to its own queue on its own connection, one at a time, about
    every PROBE_INTERVAL s; keeps (monotonic send time, latency s)."""

    def __init__(self, d: Daemon) -> None:
        super().__init__(daemon=True, name="leaseq-bench-probe")
        self.client = d.client()
        self.samples: list[tuple[float, float]] = []
        self.halt = threading.Event()
        self.failure: BaseException | None = None

    def run(self) -> None:
        payload = b"p" * PAYLOAD
        try:
            nxt = time.monotonic()
            while not self.halt.is_set():
                t0 = time.monotonic()
                self.client.execute_command("QPUSH", PROBE_QUEUE, payload)
                t1 = time.monotonic()
                self.samples.append((t0, t1 - t0))
                nxt = max(nxt + PROBE_INTERVAL, t1)
                pause = nxt - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
        except BaseException as e:  # noqa: BLE001 - reported by the caller
            self.failure = e
        finally:
            self.client.close()

    def window(self, start: float, end: float) -> dict:
        lat = [s for t, s in self.samples if start <= t < end]
        ms = [x * 1000 for x in lat]
        return {"seconds": round(end - start, 3), "samples": len(ms), "p50_ms": percentile(ms, 50),
                "p99_ms": percentile(ms, 99), "max_ms": max(ms) if ms else math.nan}


def poll_info(d: Daemon, seconds: float) -> None:
    """Sleep ``seconds`` while polling INFO persistence as the snapshot
    window does, so both windows carry the same load."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        d.info("persistence")
        time.sleep(min(0.05, max(0.0, end - time.monotonic())))


def snapshot_under_probe(d: Daemon) -> dict:
    """BGSAVE while the probe runs, then the same length without a snapshot."""
    before = d.info("persistence").get("snapshots_taken", 0)
    probe = Probe(d)
    probe.start()
    try:
        time.sleep(0.5)                     # let the probe settle
        with d.client() as c:
            c.set_response_callback("BGSAVE", lambda r, **_kw: r)    # the status line, not True
            t0 = time.monotonic()
            reply = c.execute_command("BGSAVE")
        info = wait_snapshot(d, before, timeout=900, interval=0.05)     # the same polling as poll_info
        t1 = time.monotonic()
        time.sleep(0.2)
        b0 = time.monotonic()
        poll_info(d, max(t1 - t0, 1.0))
        b1 = time.monotonic()
    finally:
        probe.halt.set()
        probe.join(30)
    if probe.failure is not None:
        raise RuntimeError(f"the probe failed: {probe.failure!r}")
    return {
        "bgsave_reply": reply.decode() if isinstance(reply, bytes) else str(reply),
        "wall_seconds": round(t1 - t0, 3),
        "duration_ms": info.get("last_snapshot_duration_ms"),
        "bytes": info.get("last_snapshot_bytes"),
        "status": info.get("last_snapshot_status"),
        "latency_during_snapshot": probe.window(t0, t1),
        "latency_without_snapshot": probe.window(b0, b1),
        "probe_jobs": len(probe.samples),
    }


def recovery_figures(d: Daemon, ready: float) -> dict:
    rec = d.recovery() or {}
    info = d.info("persistence")
    mem = d.info("memory")
    seconds = rec.get("seconds", math.nan)
    loaded = rec.get("records", 0) + rec.get("snapshot_jobs", 0)
    return {
        "ready_seconds": round(ready, 3),
        "recovery_seconds": seconds,
        "snapshot": rec.get("snapshot"),
        "snapshot_jobs": rec.get("snapshot_jobs", 0),
        "snapshot_bytes": rec.get("snapshot_bytes", 0),
        "segments": rec.get("segments"),
        "records": rec.get("records"),
        "bytes": rec.get("bytes"),
        "info_recovery_records": info.get("recovery_records"),
        "info_recovery_seconds": info.get("recovery_seconds"),
        "records_per_s": (rec.get("records", 0) / seconds) if seconds and seconds > 0 else math.nan,
        "jobs_and_records_per_s": (loaded / seconds) if seconds and seconds > 0 else math.nan,
        "bytes_per_s": ((rec.get("bytes", 0) + rec.get("snapshot_bytes", 0)) / seconds
                        if seconds and seconds > 0 else math.nan),
        "live_jobs_per_s": (mem.get("jobs_live", 0) / seconds) if seconds and seconds > 0 else math.nan,
        "jobs_live": mem.get("jobs_live"),
        "rss": mem.get("used_memory_rss"),
    }


def recovery_and_memory(work: str, jobs: int, started: list, say) -> dict:
    """Measurements 1, 2 and 4 on one data directory."""
    d = Daemon(os.path.join(work, "recovery"), os.path.join(work, "recovery.log"))
    started.append(d)
    d.start()
    time.sleep(0.3)
    empty = d.rss()
    say(f"pushing {jobs:,} jobs")
    with d.client() as c:
        seconds = push(c, QUEUE, jobs)
    mem = d.info("memory")
    pers = d.info("persistence")
    out: dict = {"push": {
        "jobs": jobs, "seconds": round(seconds, 3), "jobs_per_s": jobs / seconds if seconds else math.nan,
        "data_dir_bytes": dir_bytes(d.data_dir), "wal_bytes": pers.get("wal_bytes"),
        "snapshots_taken": pers.get("snapshots_taken"),
    }}
    out["memory"] = {"rss_empty": empty, "rss_after_push": mem["used_memory_rss"],
                     "jobs_live_after_push": mem["jobs_live"],
                     "per_job_after_push": per_job(mem["used_memory_rss"], empty, mem["jobs_live"])}

    say("kill -9, restart from the log")
    d.kill()
    ready = d.start()
    out["recovery_from_log"] = recovery_figures(d, ready)
    r = out["recovery_from_log"]
    out["memory"].update({"rss_after_log_restart": r["rss"], "jobs_live_after_log_restart": r["jobs_live"],
                          "per_job_after_log_restart": per_job(r["rss"], empty, r["jobs_live"])})

    say("BGSAVE with the latency probe running")
    out["snapshot"] = snapshot_under_probe(d)
    out["snapshot"]["data_dir_bytes_after"] = dir_bytes(d.data_dir)

    say("kill -9, restart from the snapshot")
    d.kill()
    ready = d.start()
    r = recovery_figures(d, ready)
    out["recovery_from_snapshot"] = r
    out["memory"].update({"rss_after_snapshot_restart": r["rss"], "jobs_live_after_snapshot_restart": r["jobs_live"],
                          "per_job_after_snapshot_restart": per_job(r["rss"], empty, r["jobs_live"])})
    d.stop()
    return out


def churn(work: str, name: str, cycles: int, env: dict | None, started: list, say) -> dict:
    """Measurement 3: LIVE jobs, then ``cycles`` push/claim/ack in batches."""
    d = Daemon(os.path.join(work, f"churn-{name}"), os.path.join(work, f"churn-{name}.log"), env=env)
    started.append(d)
    d.start()
    say(f"churn ({name}): {LIVE:,} live, {cycles:,} push/claim/ack cycles")
    t0 = time.perf_counter()
    with d.client() as c:
        push(c, QUEUE, LIVE)
        done = 0
        while done < cycles:
            k = min(CYCLE_BATCH, cycles - done)
            pipe = c.pipeline(transaction=False)
            pipe.execute_command("QPUSHMANY", QUEUE, k, *payloads(LIVE + done, k))
            pipe.execute_command("QCLAIM", QUEUE, "bench", "COUNT", k, "LEASE", 600000)
            _ids, claimed = pipe.execute()
            tokens = []
            for job in claimed:
                fields = dict(zip(job[::2], job[1::2]))
                tokens.append(fields[b"lease"])
            if tokens:
                c.execute_command("QACK", QUEUE, *tokens)
            done += k
    seconds = time.perf_counter() - t0
    deadline = time.monotonic() + 300
    while True:
        info = d.info("persistence")
        if info.get("snapshot_in_progress") == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    mem = d.info("memory")
    size = dir_bytes(d.data_dir)
    live = LIVE * PAYLOAD
    out = {
        "snapshot_min_bytes": info.get("snapshot_min_bytes"), "cycles": cycles, "seconds": round(seconds, 3),
        "cycles_per_s": cycles / seconds if seconds else math.nan, "jobs_live": mem.get("jobs_live"),
        "live_bytes": live, "data_dir_bytes": size, "ratio": size / live,
        "wal_segments": info.get("wal_segments"), "wal_bytes": info.get("wal_bytes"),
        "snapshots_taken": info.get("snapshots_taken"), "last_snapshot_bytes": info.get("last_snapshot_bytes"),
    }
    d.stop()
    return out


def run(jobs: int, cycles: int, json_path: str | None, say=None) -> dict:
    say = say or progress
    work = tempfile.mkdtemp(prefix="leaseq-bench-storage-")
    started: list[Daemon] = []
    t0 = time.monotonic()
    try:
        result: dict = {"settings": {
            "jobs": jobs, "cycles": cycles, "payload_bytes": PAYLOAD, "push": f"QPUSHMANY {PUSH_BATCH}",
            "pipeline": PIPELINE, "live_jobs_in_churn": LIVE, "cycle_batch": CYCLE_BATCH,
            "python": platform.python_version(), "redis_py": redis.__version__,
            "hiredis": bool(getattr(redis.utils, "HIREDIS_AVAILABLE", False)), "cpus": os.cpu_count(),
        }}
        result.update(recovery_and_memory(work, jobs, started, say))
        result["churn"] = {
            "default": churn(work, "default", cycles, None, started, say),
            "1mb": churn(work, "1mb", cycles, {"LEASEQ_SNAPSHOT_MIN_BYTES": "1mb"}, started, say),
        }
        result["baseline_before_snapshots"] = BASELINE
        result["total_seconds"] = round(time.monotonic() - t0, 1)
    finally:
        for d in started:
            d.kill()
        shutil.rmtree(work, ignore_errors=True)
    return publish(result, report, json_path)


def report(r: dict) -> None:
    n = r["settings"]["jobs"]
    at = "" if n == DEFAULT_JOBS else " (1M jobs)"
    p, m = r["push"], r["memory"]
    rl, rs, s = r["recovery_from_log"], r["recovery_from_snapshot"], r["snapshot"]
    ls, lb = s["latency_during_snapshot"], s["latency_without_snapshot"]
    rows = [
        ("push: jobs", n, "jobs", ""),
        ("push: rate", p["jobs_per_s"], "jobs/s", ""),
        ("push: data dir (log)", mib(p["data_dir_bytes"]), "MiB", f"{BASELINE['log_mib_1m']} MiB{at}"),
        ("recovery from log: start to PONG", rl["ready_seconds"], "s", f"{BASELINE['restart_seconds_1m']} s{at}"),
        ("recovery from log: recovery proper", rl["recovery_seconds"], "s", ""),
        ("recovery from log: records", rl["records"] or 0, "records", ""),
        ("recovery from log: bytes read", mib(rl["bytes"] or 0), "MiB", ""),
        ("recovery from log: rate", rl["records_per_s"], "records/s", ""),
        ("recovery from log: rate in jobs", rl["live_jobs_per_s"], "jobs/s", ""),
        ("recovery from log: rate in bytes", mib(rl["bytes_per_s"]), "MiB/s", ""),
        ("snapshot: duration", s["duration_ms"], "ms", ""),
        ("snapshot: size", mib(s["bytes"] or 0), "MiB", ""),
        ("snapshot: data dir after it (log kept as fallback)", mib(s["data_dir_bytes_after"]), "MiB", ""),
        ("recovery from snapshot: start to PONG", rs["ready_seconds"], "s", f"{BASELINE['restart_seconds_1m']} s{at}"),
        ("recovery from snapshot: recovery proper", rs["recovery_seconds"], "s", ""),
        ("recovery from snapshot: snapshot jobs", rs["snapshot_jobs"], "jobs", ""),
        ("recovery from snapshot: log records after", rs["records"] or 0, "records", ""),
        ("recovery from snapshot: rate", rs["jobs_and_records_per_s"], "jobs+records/s", ""),
        ("recovery from snapshot: rate in bytes", mib(rs["bytes_per_s"]), "MiB/s", ""),
        ("memory: empty daemon RSS", mib(m["rss_empty"]), "MiB", ""),
        ("memory: per job beyond payload, pushed", m["per_job_after_push"], "bytes",
         f"{BASELINE['memory_per_job_bytes']} bytes"),
        ("memory: per job beyond payload, after log restart", m["per_job_after_log_restart"], "bytes",
         f"{BASELINE['memory_per_job_bytes']} bytes"),
        ("memory: per job beyond payload, after snapshot restart", m["per_job_after_snapshot_restart"], "bytes",
         f"{BASELINE['memory_per_job_bytes']} bytes"),
        ("latency during snapshot: p50", ls["p50_ms"], "ms", ""),
        ("latency during snapshot: p99", ls["p99_ms"], "ms", ""),
        ("latency during snapshot: max", ls["max_ms"], "ms", ""),
        ("latency during snapshot: samples / window", f"{ls['samples']} / {ls['seconds']} s", "", ""),
        ("latency without snapshot: p50", lb["p50_ms"], "ms", ""),
        ("latency without snapshot: p99", lb["p99_ms"], "ms", ""),
        ("latency without snapshot: max", lb["max_ms"], "ms", ""),
        ("latency without snapshot: samples / window", f"{lb['samples']} / {lb['seconds']} s", "", ""),
    ]
    for name, c in r["churn"].items():
        rows += [
            (f"churn {name}: data dir / live bytes", c["ratio"], "x", ""),
            (f"churn {name}: data dir", mib(c["data_dir_bytes"]), "MiB", ""),
            (f"churn {name}: snapshots taken", c["snapshots_taken"], "", ""),
            (f"churn {name}: rate", c["cycles_per_s"], "cycles/s", ""),
        ]
    cfg = r["settings"]
    title = (f"leaseq bench storage: {n:,} jobs of {cfg['payload_bytes']} bytes, {cfg['cycles']:,} churn cycles "
             f"with {cfg['live_jobs_in_churn']:,} live (churn default = snapshot-min-bytes "
             f"{r['churn']['default']['snapshot_min_bytes']:,} bytes, 1mb = 1,048,576); "
             f"{r['total_seconds']} s in all")
    print_table(title, rows)
