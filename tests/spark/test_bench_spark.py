"""`leaseq bench spark` at its smallest: it runs through, prints its figures
and writes JSON.  The rates are never checked (a benchmark); the duplicate
counts are: a keyed write leaves one job per row, after a forced retry and
after a re-run."""

import json
import subprocess
import sys

import pytest


@pytest.mark.timeout(180)
def test_bench_spark_runs_and_reports(tmp_path):
    out = tmp_path / "bench.json"
    run = subprocess.run([sys.executable, "-m", "leaseq.cli", "bench", "spark", "--rows", "40000",
                          "--json", str(out)], capture_output=True, text=True, timeout=170, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    for figure in ("write without a key", "write with a key column", "forced task retry (keyed): time",
                   "duplicate jobs", "full re-run (keyed)"):
        assert figure in run.stdout, run.stdout
    data = json.loads(out.read_text())
    assert data["settings"]["rows"] == 40000
    assert data["keyed"]["jobs"] == data["no_key"]["jobs"] == 40000
    assert data["forced_retry"]["duplicate_jobs"] == 0 and data["forced_retry"]["found_by_key"] > 0
    assert data["rerun"]["duplicate_jobs"] == 0 and data["rerun"]["found_by_key"] == 40000
