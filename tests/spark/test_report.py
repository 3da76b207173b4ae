"""``leaseq report`` (leaseq.pipeline.report): a log the test wrote through a
real daemon on a frozen DEBUG clock, so every wait, processing time, count
and rate has one right answer; the Parquet tables and the HTML page; the
command line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import datetime, timezone

import pytest

from harness import Daemon, as_map

from leaseq.pipeline.report import build_report

T0_MINUTE = 60_000


def _ids(reply) -> list[int]:
    return [as_map(j)[b"id"] for j in reply]


def _tokens(reply) -> list[bytes]:
    return [as_map(j)[b"lease"] for j in reply]


@pytest.fixture(scope="module")
def known_log(tmp_path_factory):
    """orders (MAXDELIVERIES 2, DEADLETTER orders-dl): 5 jobs a..e pushed at
    t0; emails: one job a minute later.  Returns (data dir, t0 ms)."""
    base = tmp_path_factory.mktemp("report")
    d = Daemon(str(base / "data"), env={"LEASEQ_ENABLE_DEBUG_COMMAND": "yes"}).start()
    try:
        c = d.client()
        now = as_map(c.execute_command("DEBUG", "CLOCK"))[b"now"]
        t0 = (now // T0_MINUTE + 2) * T0_MINUTE        # a minute boundary: the buckets are known
        c.execute_command("DEBUG", "CLOCK", "FREEZE", t0)
        at = t0

        def to(ms):                                    # move the frozen clock to t0 + ms
            nonlocal at
            c.execute_command("DEBUG", "CLOCK", "ADVANCE", t0 + ms - at)
            at = t0 + ms

        def claim(expect, lease=60_000):
            reply = c.execute_command("QCLAIM", "orders", "w", "LEASE", lease)
            assert _ids(reply) == [expect]
            return _tokens(reply)[0]

        c.execute_command("QCREATE", "orders", "MAXDELIVERIES", 2, "DEADLETTER", "orders-dl")
        a, b, cc, dd, e = c.execute_command("QPUSHMANY", "orders", 5, "a", "b", "c", "d", "e")
        to(1000); t = claim(a)                                                  # wait 1000
        to(1500); c.execute_command("QACK", "orders", t)                        # processing 500
        to(3000); t = claim(b)                                                  # wait 3000
        to(3200); c.execute_command("QNACK", "orders", t, "DELAY", 0, "ERROR", "boom")
        to(4000); t = claim(b)                                                  # ready-again first
        to(4700); c.execute_command("QACK", "orders", t)                        # processing 700
        to(5000); t = claim(cc)                                                 # wait 5000
        to(7000); c.execute_command("QACK", "orders", t)                        # processing 2000
        to(8000); t = claim(dd)                                                 # wait 8000
        to(8100); c.execute_command("QNACK", "orders", t, "DELAY", 0, "ERROR", "boom")
        to(9000); t = claim(dd)
        to(9100); c.execute_command("QNACK", "orders", t, "DELAY", 0, "ERROR", "bad input")
        to(10000); claim(e, lease=1000)                # d would be delivery 3: dead; e instead (wait 10000)
        to(13000); t = claim(e)                        # e's first lease ran out: an expired lease
        to(13500); c.execute_command("QACK", "orders", t)                       # processing 500
        to(61000); x = c.execute_command("QPUSH", "emails", "x")
        to(62000); t = _tokens(c.execute_command("QCLAIM", "emails", "m", "LEASE", 60_000))[0]
        to(62250); c.execute_command("QACK", "emails", t)                       # wait 1000, processing 250
        assert x == 1
    finally:
        d.stop()
    return d.data_dir, t0


@pytest.fixture(scope="module")
def report(spark, known_log, tmp_path_factory):
    data_dir, t0 = known_log
    out = str(tmp_path_factory.mktemp("out"))
    summary = build_report(spark, [data_dir], out, 60)
    return out, summary, t0


def table(spark, out, name) -> list[dict]:
    return [r.asDict() for r in spark.read.parquet(os.path.join(out, name)).collect()]


def test_latency_percentiles_are_the_known_waits_and_processing_times(spark, report):
    out, _s, _t0 = report
    got = {(r["queue"], r["measure"]): (r["count"], r["p50_ms"], r["p90_ms"], r["p99_ms"], r["max_ms"])
           for r in table(spark, out, "latency")}
    assert got == {
        ("orders", "wait"): (5, 5000, 10000, 10000, 10000),        # 1000 3000 5000 8000 10000
        ("orders", "processing"): (4, 500, 2000, 2000, 2000),      # 500 500 700 2000
        ("emails", "wait"): (1, 1000, 1000, 1000, 1000),
        ("emails", "processing"): (1, 250, 250, 250, 250),
    }


def test_rates_count_retries_redeliveries_dead_letters_and_the_expired_lease(spark, report):
    out, _s, _t0 = report
    got = {r["queue"]: r for r in table(spark, out, "rates")}
    assert set(got) == {"orders", "orders-dl", "emails"}
    o = got["orders"]
    assert (o["pushed"], o["claims"], o["acked"], o["nacked"], o["dead"]) == (5, 8, 4, 3, 1)
    assert (o["jobs_claimed"], o["jobs_retried"], o["redelivered"], o["expired_leases"]) == (5, 3, 3, 1)
    assert o["retry_rate"] == pytest.approx(0.6) and o["dead_letter_rate"] == pytest.approx(0.2)
    dl = got["orders-dl"]                              # the dead copy arrives as a push
    assert (dl["pushed"], dl["claims"], dl["retry_rate"], dl["dead_letter_rate"]) == (1, 0, None, 0.0)
    m = got["emails"]
    assert (m["pushed"], m["acked"], m["retry_rate"], m["expired_leases"]) == (1, 1, 0.0, 0)


def test_top_errors_per_queue(spark, report):
    out, _s, _t0 = report
    got = sorted((r["queue"], r["rank"], r["kind"], r["error"], r["count"]) for r in table(spark, out, "errors"))
    assert got == [("orders", 1, "nack", "boom", 2),
                   ("orders", 2, "dead", "max-deliveries", 1),
                   ("orders", 3, "nack", "bad input", 1)]


def test_throughput_per_minute_bucket_with_the_empty_ones(spark, report):
    out, _s, t0 = report
    minute0 = datetime.fromtimestamp(t0 / 1000, tz=timezone.utc)
    minute1 = datetime.fromtimestamp((t0 + 60_000) / 1000, tz=timezone.utc)
    got = {(r["queue"], r["bucket_start"].astimezone(timezone.utc)): (r["push"], r["claim"], r["ack"], r["nack"],
                                                                      r["dead"])
           for r in spark.read.parquet(os.path.join(out, "throughput")).collect()}
    assert got == {
        ("orders", minute0): (5, 8, 4, 3, 1), ("orders", minute1): (0, 0, 0, 0, 0),
        ("orders-dl", minute0): (1, 0, 0, 0, 0), ("orders-dl", minute1): (0, 0, 0, 0, 0),
        ("emails", minute0): (0, 0, 0, 0, 0), ("emails", minute1): (1, 1, 1, 0, 0),
    }


def test_the_html_page_is_self_contained_and_names_the_queues(report, known_log):
    out, summary, t0 = report
    assert summary["events"] == 26 and summary["queues"] == 3      # 25 changes, and the expire the daemon noticed
    assert summary["first"] == datetime.fromtimestamp(t0 / 1000, tz=timezone.utc)
    with open(os.path.join(out, "report.html"), encoding="utf-8") as f:
        page = f.read()
    assert not re.search(r"<script[^>]*\bsrc=", page)            # no CDN, no file: the JS is inline
    assert page.count("Plotly.newPlot") == 4
    assert len(re.findall(r"plotly\.js v\d", page)) == 1         # the library once
    for q in ("orders", "orders-dl", "emails", "boom", known_log[0], "<h2>Sources</h2>"):
        assert q in page


def _cli(*args, **kw):
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    return subprocess.run([sys.executable, "-m", "leaseq.cli", "report", *args], capture_output=True,
                          text=True, env=env, timeout=180, **kw)


def test_the_report_command(known_log, tmp_path):
    out = tmp_path / "r"
    done = _cli(known_log[0], "--out", str(out), "--bucket", "30s")
    assert done.returncode == 0, done.stderr
    assert "26 events, 3 queues, 1 sources" in done.stdout
    for name in ("throughput", "latency", "rates", "errors"):
        assert any(n.endswith(".parquet") for n in os.listdir(out / name)), name
    assert (out / "report.html").stat().st_size > 1_000_000


def test_the_report_command_refuses_a_missing_directory(tmp_path):
    done = _cli(str(tmp_path / "nope"), "--out", str(tmp_path / "r"))
    assert done.returncode == 1
    assert f"error: {tmp_path / 'nope'} is not a directory" in done.stderr
    assert not (tmp_path / "r").exists()


def test_the_schedules_table_counts_fires_skips_and_the_longest_gap(spark, tmp_path):
    """EVERY 1000 on a frozen clock: three fires a second apart, then a jump
    of 5 s (three ticks missed and skipped, two in time), so: fired 5,
    skipped 3, and the longest gap between fires 5 s."""
    d = Daemon(str(tmp_path / "data"), env={"LEASEQ_ENABLE_DEBUG_COMMAND": "yes"}).start()
    try:
        c = d.client()
        c.execute_command("DEBUG", "CLOCK", "FREEZE")
        c.execute_command("QSCHEDULE", "jobs", "beat", "x", "EVERY", 1000)
        for _ in range(3):
            c.execute_command("DEBUG", "CLOCK", "ADVANCE", 1000)
        c.execute_command("DEBUG", "CLOCK", "ADVANCE", 5000)      # ticks 4000..8000: 4000-6000 missed
        listed = as_map(c.execute_command("QSCHEDULES", "jobs")[0])
        assert (listed[b"fired"], listed[b"skipped"]) == (5, 3)
    finally:
        d.stop()
    out = str(tmp_path / "out")
    build_report(spark, [d.data_dir], out, 60)
    (row,) = table(spark, out, "schedules")
    assert (row["queue"], row["schedule"], row["fired"], row["skipped"], row["max_gap_ms"]) == (
        "jobs", "beat", 5, 3, 5000)
    assert (row["last_fire"] - row["first_fire"]).total_seconds() == 7.0
    with open(os.path.join(out, "report.html"), encoding="utf-8") as f:
        page = f.read()
    assert "<h2>Schedules</h2>" in page and "beat" in page


def test_many_sources_each_and_the_total(spark, tmp_path):
    """Three pods on frozen clocks, each with job 1 (ids collide): pod k
    pushes k+1 jobs, claims them all k seconds after, acks the first 250 ms
    later and nacks the rest.  Each source's wait is its own k seconds (a
    job keyed without its source would mix them); the total has them all."""
    dirs = []
    for k, pod in enumerate(("pod-a", "pod-b", "pod-c"), 1):
        (tmp_path / pod).mkdir()
        d = Daemon(str(tmp_path / pod / "data"), env={"LEASEQ_ENABLE_DEBUG_COMMAND": "yes"}).start()
        try:
            c = d.client()
            c.execute_command("DEBUG", "CLOCK", "FREEZE")
            assert c.execute_command("QPUSHMANY", "jobs", k + 1, *[b"x"] * (k + 1))[0] == 1
            c.execute_command("DEBUG", "CLOCK", "ADVANCE", 1000 * k)
            leases = _tokens(c.execute_command("QCLAIM", "jobs", "w", "COUNT", k + 1, "LEASE", 60_000))
            c.execute_command("DEBUG", "CLOCK", "ADVANCE", 250)
            c.execute_command("QACK", "jobs", leases[0])
            for t in leases[1:]:
                c.execute_command("QNACK", "jobs", t, "ERROR", f"pod {k}")
        finally:
            d.stop()
        dirs.append(d.data_dir)
    out = str(tmp_path / "out")
    summary = build_report(spark, [str(tmp_path / "*" / "data")], out, 60)
    assert sorted(summary["sources"]) == ["pod-a", "pod-b", "pod-c"]
    got = {r["source"]: r for r in table(spark, out, "sources")}
    assert sorted(got) == ["(all)", "pod-a", "pod-b", "pod-c"]
    for k, pod in enumerate(("pod-a", "pod-b", "pod-c"), 1):
        r = got[pod]
        assert (r["events"], r["pushed"], r["acked"], r["nacked"], r["errors"]) == (
            3 * (k + 1), k + 1, 1, k, k)                       # push and claim each, an ack, k nacks
        assert (r["wait_p50_ms"], r["wait_p99_ms"], r["processing_p50_ms"]) == (1000 * k, 1000 * k, 250)
        assert r["push_per_s"] == pytest.approx((k + 1) / ((1000 * k + 250) / 1000))
    total = got["(all)"]
    assert (total["events"], total["pushed"], total["acked"], total["errors"]) == (
        sum(r["events"] for s, r in got.items() if s != "(all)"), 9, 3, 6)
    assert (total["wait_p50_ms"], total["wait_p99_ms"], total["processing_p99_ms"]) == (2000, 3000, 250)
    (rates,) = table(spark, out, "rates")                     # per queue, all pods: jobs are per source
    assert (rates["jobs_claimed"], rates["pushed"], rates["nacked"]) == (9, 9, 6)
    errors = {r["error"]: r["count"] for r in table(spark, out, "errors")}
    assert errors == {"pod 1": 1, "pod 2": 2, "pod 3": 3}
    with open(os.path.join(out, "report.html"), encoding="utf-8") as f:
        page = f.read()
    assert "3 sources" in page and all(f"{p}: {d}" in page for p, d in zip(("pod-a", "pod-b", "pod-c"), dirs))


def test_the_report_command_refuses_a_pattern_that_does_not_name_a_source(tmp_path):
    (tmp_path / "a" / "data").mkdir(parents=True)
    done = _cli(str(tmp_path / "*" / "data"), "--out", str(tmp_path / "r"), "--source-pattern", "nomatch")
    assert done.returncode == 1
    assert f"error: sourcePattern 'nomatch' does not match {tmp_path / 'a' / 'data'}" in done.stderr
    assert not (tmp_path / "r").exists()


def test_the_spark_submit_entry_refuses_bad_paths_before_spark_starts(tmp_path, capsys):
    """pipeline/report.py's main (what spark-submit runs), in this process."""
    from leaseq.pipeline.report import main

    assert main([str(tmp_path / "nope"), "--out", str(tmp_path / "r")]) == 1
    assert f"error: {tmp_path / 'nope'} is not a directory" in capsys.readouterr().err
    (tmp_path / "p" / "data").mkdir(parents=True)
    assert main([str(tmp_path / "*" / "data"), "--out", str(tmp_path / "r"), "--source-pattern", "(x"]) == 1
    assert "sourcePattern '(x' is not a regular expression" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
