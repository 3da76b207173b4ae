"""The benchmark reports print what they measured, even a zero: a short
run can end before the server's CPU clock ticks (10 ms), and a ratio
against a zero is shown as "-", not a crash after the figures were taken."""

from leaseq.bench.floor import report_queue, times


def test_times_divides_or_says_nothing_was_measured():
    assert times(3.0, 2.0) == "1.50"
    assert times(3.0, 0.0) == "-"
    assert times(3.0, None) == "-"


def test_report_queue_with_a_server_whose_cpu_did_not_tick(capsys):
    figures = {"jobs_per_s": 160, "sustained": "1/1", "p99_ms": 1.0}
    result = {"settings": {"rate": 160, "seconds": 0.5, "reps": 1}, "machine": {"server_cpus": [0]},
              "results": {"redis": {**figures, "server_cpu_us_per_job": 125.0},
                          "minimal": {**figures, "server_cpu_us_per_job": 125.0},
                          "compiled": {**figures, "server_cpu_us_per_job": 0.0},
                          "leaseq": {**figures, "server_cpu_us_per_job": 250.0}}}
    report_queue(result)
    out = capsys.readouterr().out
    assert "leaseq against the minimal queue, Python: 2.00" in out
    assert "leaseq against the minimal queue, compiled: -" in out
    row = next(line for line in out.splitlines() if "compiled" in line and "0.0" in line)
    assert row.split()[-1] == "0.00"          # its own column against Redis is a real ratio, 0 / 125
