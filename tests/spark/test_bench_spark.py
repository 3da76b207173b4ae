"""`leaseq bench spark` at its smallest: it runs through, prints its figures
and writes JSON.  The rates and the latency are never checked (a
benchmark); the counts are: a keyed write leaves one job per row, after a
forced retry and after a re-run; the read side reads every event of every
source, in batch and as a stream, and the stream's restart from its
checkpoint adds none and misses none."""

import json
import subprocess
import sys

import pytest


@pytest.mark.timeout(240)
def test_bench_spark_runs_and_reports(tmp_path):
    out = tmp_path / "bench.json"
    run = subprocess.run([sys.executable, "-m", "leaseq.cli", "bench", "spark", "--rows", "40000",
                          "--sources", "2", "--jobs", "1000", "--live-seconds", "1", "--json", str(out)],
                         capture_output=True, text=True, timeout=230, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    for figure in ("write without a key", "write with a key column", "forced task retry (keyed): time",
                   "duplicate jobs", "full re-run (keyed)", "batch read", "streaming read (availableNow)",
                   "stream latency, median (1 s trigger)", "restart from checkpoint: new events emitted"):
        assert figure in run.stdout, run.stdout
    everything = json.loads(out.read_text())
    read = everything["read"]
    assert read["batch"]["events"] == read["stream"]["events"] == 2 * 1000 * 3     # push, claim, ack
    assert read["batch"]["partitions"] == 2
    r = read["restart"]
    assert r["emitted_after_restart"] == r["missing"] == r["twice"] == r["run_again_differently"] == 0
    assert r["batch_read"] == r["emitted_before"] > 0 and read["latency"]["events"] > 0
    data = everything["write"]
    assert data["settings"]["rows"] == 40000
    assert data["keyed"]["jobs"] == data["no_key"]["jobs"] == 40000
    assert data["forced_retry"]["duplicate_jobs"] == 0 and data["forced_retry"]["found_by_key"] > 0
    assert data["rerun"]["duplicate_jobs"] == 0 and data["rerun"]["found_by_key"] == 40000
