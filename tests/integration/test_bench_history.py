"""``leaseq bench history`` runs end to end at a small size and reports its
figures (its full-size figures are in docs/operations.md)."""

from __future__ import annotations

import pytest
from harness import run_bench


@pytest.mark.timeout(150)
def test_bench_history_runs_and_reports(tmp_path):
    data = run_bench(tmp_path, "history", "--rate", "500", "--seconds", "1", "--rounds", "1", "--hours", "2",
                     "--queues", "2", timeout=140, figures=(
                         "history off (history-hours 0)", "history on (history-hours 72)",
                         "cost of history: median of the rounds' differences",
                         "the history's own CPU a job, in process", "disk a queue (2 h of minutes, 2 queues)",
                         "status page ?range=72h, median"))
    assert data["cpu"]["runs"]["on"][0]["jobs"] > 0 and data["cpu"]["runs"]["off"][0]["jobs"] > 0
    assert data["hook"]["us_per_job_on"] > 0 and data["hook"]["us_per_job_off"] > 0
    fill = data["fill"]
    assert fill["minutes_kept_per_queue"] == 2 * 60            # every minute of the two hours kept
    assert 0 < fill["disk_bytes_per_queue"] < 200 * 2 * 60      # about 80 bytes a minute
    assert all(fill[f"page_{span}"]["bytes"] > 0 for span in ("1h", "24h", "72h"))
