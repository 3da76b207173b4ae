"""`leaseq bench storage` at its smallest: it runs through, prints its figures
and writes JSON.  The figures themselves are never checked (a benchmark)."""

import json
import subprocess
import sys

import pytest


@pytest.mark.timeout(120)
def test_bench_storage_runs_and_reports(tmp_path):
    out = tmp_path / "bench.json"
    run = subprocess.run(
        [sys.executable, "-m", "leaseq.daemon.cli", "bench", "storage", "--jobs", "20000", "--cycles", "2000",
         "--json", str(out)],
        capture_output=True, text=True, timeout=110, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stdout + run.stderr
    for figure in ("recovery from log: start to PONG", "recovery from log: recovery proper",
                   "recovery from snapshot: start to PONG", "recovery from snapshot: recovery proper",
                   "memory: per job beyond payload, pushed", "memory: per job beyond payload, after snapshot restart",
                   "churn default: data dir / live bytes", "churn 1mb: data dir / live bytes",
                   "churn 1mb: snapshots taken", "latency during snapshot: p99", "latency without snapshot: p99",
                   "snapshot: duration", "before snapshots"):
        assert figure in run.stdout, run.stdout
    data = json.loads(out.read_text())
    assert set(data) >= {"settings", "push", "memory", "recovery_from_log", "snapshot", "recovery_from_snapshot",
                         "churn", "baseline_before_snapshots"}
    assert data["settings"]["jobs"] == 20000 and data["settings"]["cycles"] == 2000
    for key in ("ready_seconds", "recovery_seconds", "records", "records_per_s"):
        assert key in data["recovery_from_log"] and key in data["recovery_from_snapshot"]
    assert data["recovery_from_snapshot"]["snapshot"], "the second restart did not load a snapshot"
    assert {"per_job_after_push", "per_job_after_snapshot_restart", "rss_empty"} <= set(data["memory"])
    assert {"duration_ms", "bytes", "latency_during_snapshot", "latency_without_snapshot"} <= set(data["snapshot"])
    for window in ("latency_during_snapshot", "latency_without_snapshot"):
        assert {"p50_ms", "p99_ms", "max_ms", "samples"} <= set(data["snapshot"][window])
    for name in ("default", "1mb"):
        assert {"ratio", "data_dir_bytes", "snapshots_taken", "live_bytes"} <= set(data["churn"][name])
    assert data["churn"]["1mb"]["snapshot_min_bytes"] == 1 << 20


@pytest.mark.timeout(60)
def test_bench_http_runs_and_reports(tmp_path):
    out = tmp_path / "http.json"
    run = subprocess.run(
        [sys.executable, "-m", "leaseq.daemon.cli", "bench", "http", "--seconds", "1.5", "--queues", "5",
         "--json", str(out)], capture_output=True, text=True, timeout=50, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stdout + run.stderr
    for figure in ("QPUSH p99, no scrape", "QPUSH p99, scraped every 1 s", "scrape: size"):
        assert figure in run.stdout, run.stdout
    data = json.loads(out.read_text())
    assert data["with_scrape"]["pushes"] > 0 and data["without_scrape"]["pushes"] > 0
    assert data["scrape"]["count"] >= 1 and data["scrape"]["bytes"] > 0
