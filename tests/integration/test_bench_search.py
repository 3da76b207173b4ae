"""`leaseq bench search` at its smallest: it runs, prints its figures and
writes its JSON (the figures are a benchmark's, never checked here)."""

from __future__ import annotations

import pytest

from harness import run_bench


@pytest.mark.timeout(120)
def test_bench_search_runs_and_reports(tmp_path):
    data = run_bench(tmp_path, "search", "--jobs", "20000", "--slice", "1000", figures=(
        "leaseq bench search: 20,000 jobs", "search: payload glob: probe p50 / p99 / max",
        "bulk cancel: action: probe p50 / p99 / max", "probe worst reply, all phases but idle"))
    assert data["settings"] == {"jobs": 20000, "qscan_count": 10000, "search_slice": 1000}
    assert data["search_matches"] == 2220 and data["cancel_asked"] == 10000   # the second push of 10,000: customer c1
    assert data["cancel_done"].startswith("Cancelled 10,000 of 10,000 jobs")
    # the probe ran throughout (a phase of a few milliseconds may fall between two of its requests on a
    # loaded machine, so only the two-second idle phase and the whole run must have replies)
    assert data["phases"]["idle"]["replies"] > 0 and data["worst_ms"] > 0
    assert all(set(p) == {"seconds", "replies", "p50_ms", "p99_ms", "max_ms"} for p in data["phases"].values())
