"""`leaseq bench storage`, `http`, `queue`, `flow`, `workflows`, `lifecycle`, `fullsync`, `path`, `floor` and `claims` at their smallest: they run
through, print their figures and write JSON.  The figures themselves are
never checked (a benchmark; the machines are shared and noisy)."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from harness import run_bench
from leaseq.storage.wal import RESERVE


@pytest.mark.timeout(120)
def test_bench_storage_runs_and_reports(tmp_path):
    data = run_bench(tmp_path, "storage", "--jobs", "20000", "--cycles", "2000", figures=(
        "recovery from log: start to PONG", "recovery from log: recovery proper",
        "recovery from snapshot: start to PONG", "recovery from snapshot: recovery proper",
        "memory: per job beyond payload, pushed", "memory: per job beyond payload, after snapshot restart",
        "churn default: data dir / live bytes", "churn 1mb: data dir / live bytes",
        "churn 1mb: snapshots taken", "latency during snapshot: p99", "latency without snapshot: p99",
        "snapshot: duration", "before snapshots"))
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
        [sys.executable, "-m", "leaseq.cli", "bench", "http", "--seconds", "1.5", "--queues", "5",
         "--json", str(out)], capture_output=True, text=True, timeout=50, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stdout + run.stderr
    for figure in ("QPUSH p99, no scrape", "QPUSH p99, scraped every 1 s", "scrape: size"):
        assert figure in run.stdout, run.stdout
    data = json.loads(out.read_text())
    assert data["with_scrape"]["pushes"] > 0 and data["without_scrape"]["pushes"] > 0
    assert data["scrape"]["count"] >= 1 and data["scrape"]["bytes"] > 0


QUEUE_FIGURES = {"w1": ("jobs/s", "push call p99 ms", "server CPU s", "server CPU us/job"),
                 "w2": ("jobs/s", "claim+ack p99 ms", "server CPU s", "server CPU us/job"),
                 "w2g": ("jobs/s", "claim+ack p99 ms", "server CPU s", "server CPU us/job"),
                 "w3max": ("jobs/s through", "server CPU s", "server CPU us/job"),
                 "w3rate": ("achieved jobs/s", "target sustained (reps)", "push->claim p50 ms",
                            "push->claim p99 ms", "push->claim p999 ms", "server CPU s", "server reads/job",
                            "server CPU us/read")}
QUEUE_TITLES = {"w1": "W1 produce", "w2": "W2 consume", "w2g": "W2g consume, 10,000 groups, GROUP-CONCURRENCY 1",
                "w3max": "W3 mixed, max", "w3rate": "W3 mixed, fixed rate"}
LEASEQ_ONLY = ("w2g",)        # redis has no groups


def bench_queue(tmp_path, *args, timeout=100):
    out = tmp_path / "queue.json"
    run = subprocess.run([sys.executable, "-m", "leaseq.cli", "bench", "queue", "--quick", "--reps", "1",
                          "--json", str(out), *args],
                         capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout, json.loads(out.read_text())


def table_lines(stdout, workload, cls):
    """The table rows of one workload and class, as columns: workload,
    class, figure, leaseq, redis, leaseq/redis[, better]."""
    rows = [re.split(r"\s{2,}", line.strip()) for line in stdout.splitlines() if line.startswith("  W")]
    return [r for r in rows if r[:2] == [QUEUE_TITLES[workload], cls]]


def check_queue_json(data, workloads, classes, with_redis):
    assert set(data) >= {"settings", "machine", "runs", "results", "notes", "total_seconds"}
    assert {"cpus", "python", "redis_server", "leaseq", "loadavg_start", "loadavg_end", "server_cpus",
            "load_cpus"} <= set(data["machine"])
    assert data["settings"]["reps"] == 1 and data["settings"]["workloads"] == list(workloads)
    servers = 2 if with_redis else 1
    assert len(data["runs"]) == sum(len(classes) * (1 if w in LEASEQ_ONLY else servers) for w in workloads)
    for r in data["runs"]:
        assert {"rep", "workload", "class", "server", "jobs", "jobs_per_s", "server_cpu_s", "server_cpu_us_per_job",
                "load_cpu_s", "load_cpu_share", "other_cpu_s", "other_cpu_pct", "steal_pct", "wall_s"} <= set(r), r
        assert r["steal_pct"] >= 0, r        # /proc/stat has the steal column on any kernel CI runs
        if r["workload"] == "w3rate":         # a job is three requests: at most three reads, at least one
            assert 0.5 <= r["server_reads_per_job"] <= 3.5, r
            assert r["server_cpu_us_per_read"] * r["server_reads_per_job"] == pytest.approx(r["server_cpu_us_per_job"])
        if r["workload"] in ("w1", "w2", "w2g"):
            assert r["check"] == "ok", r        # every job pushed is there (W1), none left (W2): not a speed
    for w in workloads:
        for c in classes:
            cell = data["results"][w][c]
            assert set(cell) == {"leaseq", "redis", "ratio"}
            assert {"jobs_per_s", "server_cpu_s"} <= set(cell["leaseq"])
            if w == "w3rate":
                assert {"target_per_s", "pushed_per_s", "p50_ms", "p99_ms", "p999_ms", "sustained",
                        "samples"} <= set(cell["leaseq"])
            if with_redis and w not in LEASEQ_ONLY:
                assert set(cell["redis"]) == set(cell["leaseq"])
                assert "jobs_per_s" in cell["ratio"]
            else:
                assert cell["redis"] is None and cell["ratio"] == {}


@pytest.mark.timeout(110)
def test_bench_queue_side_by_side_or_leaseq_only(tmp_path):
    """With redis-server installed: every workload and class, both servers,
    a ratio per figure.  Without it: the same run, leaseq only, with the
    note saying why."""
    with_redis = shutil.which("redis-server") is not None
    stdout, data = bench_queue(tmp_path)
    assert stdout.startswith("machine: "), stdout
    assert "leaseq bench queue: 10,000 jobs" in stdout
    assert "workload" in stdout and "leaseq/redis" in stdout and "better" in stdout
    for w, figures in QUEUE_FIGURES.items():
        for c in ("fsync", "memory"):
            rows = table_lines(stdout, w, c)
            assert {row[2] for row in rows} >= {*figures, "other processes' CPU %", "server CPU stolen by the host %"}, \
                (w, c, stdout)
            for row in rows:
                assert len(row) >= 6, row
                assert (row[4] != "-") == (with_redis and w not in LEASEQ_ONLY), row
    if with_redis:
        assert "redis-server not installed" not in stdout.splitlines()[0]
        assert "redis-server not found" not in stdout
    else:
        assert "note: redis-server not found" in stdout
    check_queue_json(data, ("w1", "w2", "w2g", "w3max", "w3rate"), ("fsync", "memory"), with_redis)
    assert "W2g vs W2, leaseq fsync: " in stdout and "W2g vs W2, leaseq memory: " in stdout


@pytest.mark.timeout(120)
def test_bench_claims_reports_each_form(tmp_path):
    """Each form's consumer CPU per job, and its ratio to XREADGROUP when
    redis-server is there; without it, leaseq's forms alone, saying so."""
    with_redis = shutil.which("redis-server") is not None
    data = run_bench(tmp_path, "claims", "--jobs", "1000", "--reps", "1",
                     figures=("leaseq bench claims: 1,000 jobs", "consumer CPU us/job", "maps", "compact", "client"))
    assert set(data["forms"]) == {"maps", "compact", "client"} | ({"xreadgroup"} if with_redis else set())
    assert all(f["cpu_us_per_job"] > 0 and f["jobs_per_s"] > 0 for f in data["forms"].values())
    alone = run_bench(tmp_path, "claims", "--jobs", "1000", "--reps", "1", "--redis-server",
                      str(tmp_path / "no-redis-server"), figures=("no redis-server (leaseq alone)",))
    assert set(alone["forms"]) == {"maps", "compact", "client"}


@pytest.mark.timeout(60)
def test_bench_queue_leaseq_only_says_so(tmp_path):
    """A redis-server that is not there: leaseq alone, a note, '-' for redis."""
    stdout, data = bench_queue(tmp_path, "--only", "w1,w3rate", "--class", "memory",
                               "--redis-server", str(tmp_path / "no-redis-server"), timeout=50)
    assert "redis-server not installed" in stdout.splitlines()[0]
    assert "note: redis-server not found" in stdout and "leaseq only" in stdout
    assert table_lines(stdout, "w1", "memory") and not table_lines(stdout, "w1", "fsync")
    assert not table_lines(stdout, "w2", "memory")
    check_queue_json(data, ("w1", "w3rate"), ("memory",), with_redis=False)
    assert any("redis-server not found" in n for n in data["notes"])


@pytest.mark.timeout(90)
def test_bench_fullsync_times_a_replicas_full_sync_and_probes_the_primary(tmp_path):
    data = run_bench(tmp_path, "fullsync", "--jobs", "20000",
                     figures=("replica started -> link up", "primary QPUSH (fsync) slowest", "primary QLEN p99"))
    assert data["jobs"] == 20000 and 0 < data["link_up_s"] <= data["caught_up_s"]
    assert data["probes_during"] >= 0 and data["read_before_p99_ms"] > 0


@pytest.mark.timeout(90)
def test_bench_queue_replicated_classes_sit_beside_fsync(tmp_path):
    """The replicated classes: leaseq only (redis has none), a primary and
    its replica per run, set beside the fsync class; at a fixed rate the
    asynchronous replica's lag is sampled, and the acknowledging one's is
    not (its replies wait for it; the sampler would weigh on their latency)."""
    (tmp_path / "replicas").mkdir()
    # 100,000 jobs: --quick's 10,000 can take under one 10 ms tick of a fast server's CPU, and the CPU a job reads 0
    stdout, data = bench_queue(tmp_path, "--only", "w1,w3rate", "--class", "fsync,replicated,replicated-async",
                               "--seconds", "1", "--jobs", "100000", "--replica-dir", str(tmp_path / "replicas"),
                               timeout=80)
    assert f"note: the replicas' data directories are under {tmp_path / 'replicas'}" in stdout
    assert not list((tmp_path / "replicas").iterdir())              # removed afterwards
    assert "leaseq replicated (one replica on this machine, not pinned) beside leaseq fsync" in stdout
    for c in ("replicated", "replicated-async"):
        rows = [row for row in table_lines(stdout, "w1", c) if "_" not in row[2]]     # the first table's
        assert rows and all(row[4] == "-" for row in rows), rows          # no redis figure
        assert data["results"]["w3rate"][c]["redis"] is None
        # the replica's own CPU, counted apart from the other processes'
        assert data["results"]["w1"][c]["leaseq"]["replica_cpu_us_per_job"] > 0
    cell = data["results"]["w3rate"]["replicated-async"]["leaseq"]
    assert cell["lag_samples"] > 0 and cell["lag_p99_ms"] >= 0 and cell["lag_resolution_ms"] > 0
    for c in ("fsync", "replicated"):
        assert "lag_p99_ms" not in data["results"]["w3rate"][c]["leaseq"], c
    assert data["results"]["w3rate"]["replicated"]["leaseq"]["p99_ms"] > 0
    assert "replica_cpu_us_per_job" not in data["results"]["w1"]["fsync"]["leaseq"]
    replica_rows = [line.split() for line in stdout.splitlines()
                    if line.startswith("  W1 produce") and "replica_cpu_us_per_job" in line]
    assert len(replica_rows) == 2 and all(float(row[-2]) > 0 for row in replica_rows), stdout   # beside the fsync server's
    beside = [line for line in stdout.splitlines() if line.startswith("  W1 produce") and "jobs_per_s" in line]
    assert len(beside) == 2, stdout                   # replicated and replicated-async, each with the fsync figure


@pytest.mark.timeout(120)
def test_bench_fsync_times_each_way_and_removes_its_files(tmp_path):
    files = tmp_path / "files"
    files.mkdir()
    data = run_bench(tmp_path, "fsync", "--count", "20", "--rounds", "2", "--bytes", "100", "--dir", str(files),
                     figures=("ways: grows / fallocated / reserved / zero-filled", "fdatasync p99", "CPU a write + fdatasync"))
    assert len(data["rounds"]) == 2 and set(data["ways"]) == {"grows", "fallocated", "reserved", "zero-filled"}
    for way in data["ways"].values():
        assert 0 < way["p50"] <= way["p99"] <= way["max"] and way["cpu"] > 0
    assert list(files.iterdir()) == []
    assert data["settings"]["reserve"] == RESERVE          # the default is what the daemon reserves


def test_bench_fsync_names_a_directory_it_cannot_write_in():
    run = subprocess.run([sys.executable, "-m", "leaseq.cli", "bench", "fsync", "--count", "10", "--dir", "/proc"],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert run.returncode == 1
    assert "cannot make a directory for the files in /proc" in run.stderr, run.stderr


@pytest.mark.timeout(120)
def test_bench_workflows_runs_and_reports(tmp_path):
    data = run_bench(tmp_path, "workflows", "--jobs", "200", "--durability", "memory",
                     figures=("chain: claim + ack each link in turn", "fan-in: the child at the end",
                              "schedule: one move firing 1,000 ticks (median)"))
    assert data["chain"]["left"] == 0 and data["fan_in"]["child_state"] == "ready"
    assert data["schedule"]["fired"] == 10_000


@pytest.mark.timeout(120)
def test_bench_flow_runs_and_reports(tmp_path):
    data = run_bench(tmp_path, "flow", "--seconds", "1.5", "--n", "20", "--window", "200",
                     figures=("RATE 20 200: that / n (at most 1.0 when the limit holds)",
                              "GROUP-RATE 20 200, 4 groups: most in any 200 ms window (per group)"))
    for key in ("rate", "group_rate"):
        assert data[key]["hand_outs"] > 0 and data[key]["max_in_window"] <= 20     # the limit is the contract
    assert data["group_rate"]["groups"] == 4


@pytest.mark.timeout(120)
def test_bench_lifecycle_runs_and_reports(tmp_path):
    out = tmp_path / "bench.json"
    run = subprocess.run(
        [sys.executable, "-m", "leaseq.cli", "bench", "lifecycle", "--cancels", "5", "--results", "20",
         "--heartbeat", "50", "--json", str(out)],
        capture_output=True, text=True, timeout=110, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stdout + run.stderr
    for figure in ("cancel → handler sees job.cancelled, heartbeat 50 ms: median",
                              "ack with RESULT → blocked QRESULT answered: median"):
        assert figure in run.stdout, run.stdout
    data = json.loads(out.read_text())
    assert data["cancel"]["count"] == 5 and data["result"]["count"] == 20
    assert 0 < data["cancel"]["median_ms"] <= data["cancel"]["max_ms"]


@pytest.mark.timeout(120)
def test_bench_floor_pings_each_server_at_the_rate(tmp_path):
    """redis-server (when installed), the bare uvloop server and leaseq, each
    answering every PING of the run; leaseq's figure is set beside the floor's."""
    with_redis = shutil.which("redis-server") is not None
    data = run_bench(tmp_path, "floor", "--rate", "600", "--seconds", "0.5", "--reps", "2",
                     figures=("leaseq bench floor: PING at 600/s", "CPU us/request", "leaseq above the floor: "))
    servers = {"floor", "leaseq"} | ({"redis"} if with_redis else set())
    assert set(data["results"]) == servers and set(data["runs"]) == servers
    for kind in servers:
        assert len(data["runs"][kind]) == 2
        for run in data["runs"][kind]:
            assert run["requests"] == 300, run            # 600 a second for 0.5 s, every one answered
            assert run["cpu_us_per_request"] >= 0          # (CPU ticks are 10 ms: a short run may show 0)
    assert ("notes" in data) != with_redis


def test_bench_floor_server_answers_resp_and_inline_pings():
    """The floor server answers +PONG to each command of a read, in RESP or inline."""
    import socket
    from leaseq.bench.common import free_port, wait_pong
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "leaseq.bench.floor", "--serve", str(port)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_pong(proc, port, time.monotonic() + 30, "the floor server")        # inline PING
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"*1\r\n$4\r\nPING\r\n" * 3 + b"*2\r\n$4\r\nECHO\r\n$1\r\nx\r\n")
            got = b""
            while len(got) < 4 * len(b"+PONG\r\n"):
                got += s.recv(1024)
        assert got == b"+PONG\r\n" * 4
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.timeout(60)
def test_a_failed_run_says_how_the_daemon_ended(tmp_path):
    """When the daemon a run started is gone (here SIGKILLed as soon as it
    answered), the run's error gives its exit status and its log's end."""
    import os
    import signal

    from leaseq.bench.queue import LeaseqServer, Settings, run_one

    class Dying(LeaseqServer):
        def start(self, cls):
            ep = super().start(cls)
            os.kill(ep.pid, signal.SIGKILL)
            self.daemon.proc.wait(30)
            return ep

    with pytest.raises(RuntimeError) as failed:
        run_one(Dying(str(tmp_path), None), "w1", "memory", Settings(10, 1.0, 100, 1, ("w1",), ("memory",), None))
    message = str(failed.value)
    assert f"had exited with {-signal.SIGKILL}; its log ends:" in message, message
    assert "leaseq ready to serve" in message, message


@pytest.mark.timeout(120)
def test_bench_floor_queue_runs_w3_on_each_server(tmp_path):
    """--queue: W3 at a fixed rate on redis-server (when installed), the
    minimal queue and leaseq; every job pushed is claimed on each."""
    with_redis = shutil.which("redis-server") is not None
    data = run_bench(tmp_path, "floor", "--queue", "--rate", "160", "--seconds", "0.5", "--reps", "1",
                     figures=("leaseq bench floor --queue: W3 at 160 single-job pushes/s", "CPU us/job",
                              "leaseq against the minimal queue, Python: ",
                              "leaseq against the minimal queue, compiled: "))
    servers = {"minimal", "compiled", "leaseq"} | ({"redis"} if with_redis else set())
    assert set(data["results"]) == servers and set(data["runs"]) == servers
    for kind in servers:
        (run,) = data["runs"][kind]
        assert run["jobs"] == 80 and run["claimed_total"] == 80, run    # 8 producers of 10 jobs, all claimed
    assert ("notes" in data) != with_redis


def start_minimal(*flags: str) -> tuple[subprocess.Popen, int]:
    """The minimal queue of ``bench floor --queue`` (``--compiled``: its
    compiled twin) on a free port, answering."""
    from leaseq.bench.common import free_port, wait_pong
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "leaseq.bench.floor", "--serve", str(port), "--queue", *flags],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_pong(proc, port, time.monotonic() + 30, "the minimal queue")
    return proc, port


@pytest.mark.timeout(60)
@pytest.mark.parametrize("flags", [(), ("--compiled",)], ids=["python", "compiled"])
def test_the_minimal_queue_is_a_lease_queue(flags):
    """What the minimal queue of ``bench floor --queue`` does, in Python and
    compiled: push, claim under a lease token, ack once, park a blocked
    claim until a push or its BLOCK runs out, and the QINFO counts."""
    import threading

    import redis
    proc, port = start_minimal(*flags)
    try:
        r = redis.Redis(port=port, socket_timeout=10, protocol=2)      # it speaks RESP2 only
        assert r.execute_command("QCREATE", "q", "DURABILITY", "memory") == b"OK"
        assert [r.execute_command("QPUSH", "q", p) for p in (b"a", b"b")] == [b"1", b"2"]
        (job,) = r.execute_command("QCLAIM", "q", "w", "COUNT", 1)
        assert job[:4] == [b"id", b"1", b"payload", b"a"] and job[4] == b"lease"
        assert r.execute_command("QINFO", "q") == [b"ready", 1, b"delayed", 0, b"in_flight", 1]
        assert r.execute_command("QACK", "q", job[5], b"no-such-token") == 1
        assert r.execute_command("QACK", "q", job[5]) == 0
        r.execute_command("QCLAIM", "q", "w", "COUNT", 5)                       # takes "b"
        started = time.monotonic()
        assert r.execute_command("QCLAIM", "q", "w", "BLOCK", 100) is None     # nothing: BLOCK runs out
        assert time.monotonic() - started >= 0.09
        got = []
        waiter = threading.Thread(target=lambda: got.append(
            redis.Redis(port=port, socket_timeout=10, protocol=2).execute_command("QCLAIM", "q", "w", "BLOCK", 5000)))
        waiter.start()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not got:
            r.execute_command("QPUSH", "q", b"c")                               # wakes the parked claim
            waiter.join(0.05)
        waiter.join(5)
        assert got and got[0][0][3] == b"c"
        assert r.info("server")["process_id"] == proc.pid        # what the benchmark accounts the CPU of
    finally:
        proc.terminate()
        proc.wait(10)


def test_the_two_minimal_queues_answer_the_same_bytes():
    """The compiled minimal queue is the Python one's twin: the same
    requests, pipelined and one by one, get the same bytes back."""
    import socket

    def pack(*args) -> bytes:
        return b"".join([b"*%d\r\n" % len(args)] + [b"$%d\r\n%s\r\n" % (len(a), a) for a in args])

    script = [pack(b"QCREATE", b"q", b"DURABILITY", b"memory"),
              pack(b"QPUSH", b"q", b"one") + pack(b"qpush", b"q", b"two") + pack(b"QPUSH", b"q", b"x" * 300),
              pack(b"QINFO", b"q"),
              pack(b"QCLAIM", b"q", b"w", b"COUNT", b"2") + pack(b"QCLAIM", b"q", b"w"),
              pack(b"QACK", b"q", b"1-4", b"2-5", b"nope") + pack(b"QACK", b"q", b"1-4"),
              pack(b"QCLAIM", b"q", b"w", b"COUNT", b"5") + pack(b"QCLAIM", b"q", b"w", b"BLOCK", b"20"),
              pack(b"QINFO", b"q") + pack(b"PING") + pack(b"QDROP", b"q")]
    answers = []
    for flags in [(), ("--compiled",)]:
        proc, port = start_minimal(*flags)
        try:
            got = []
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                for request in script:
                    s.sendall(request)
                    time.sleep(0.1)                   # (the BLOCK 20 runs out within it)
                    got.append(s.recv(65536))
            answers.append(got)
        finally:
            proc.terminate()
            proc.wait(10)
    python, compiled = answers
    assert python == compiled
    assert python[1] == b"$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n"
    assert python[4] == b":2\r\n:0\r\n" and python[5].endswith(b"*-1\r\n")


@pytest.mark.timeout(120)
def test_bench_path_times_both_loads(tmp_path):
    data = run_bench(tmp_path, "path", "--rounds", "30", figures=("batches: ", "single: ", "us per job, best of"))
    for mode in ("batches", "single"):
        assert len(data[mode]["runs"]) == 3 and data[mode]["us_per_job"] == min(data[mode]["runs"]) > 0


@pytest.mark.timeout(300)
def test_bench_path_counts_instructions_under_valgrind(tmp_path):
    data = run_bench(tmp_path, "path", "--only", "single", "--rounds", "5", "--instructions", "--functions", "4",
                     figures=("single: ", "instructions per job", "5 and 20 rounds under callgrind"),
                     timeout=280)                 # valgrind: 50 times slower, more on a busy machine
    single = data["single"]
    assert single["instructions_per_job"] > 0
    top = single["functions"]             # the C functions that ran the most of them, most first
    assert len(top) == 4 and all(":" in name for name, _n in top)
    counts = [n for _name, n in top]
    assert counts == sorted(counts, reverse=True) and counts[0] > 0


@pytest.mark.timeout(120)
def test_bench_path_idles_between_rounds_off_the_clock(tmp_path):
    data = run_bench(tmp_path, "path", "--only", "single", "--rounds", "30", "--gap-us", "2000",
                     figures=("single: ", "us per job, best of", "2,000 us idle after each round, not counted"))
    single = data["single"]
    assert single["gap_us"] == 2000 and len(single["runs"]) == 3
    assert 0 < single["us_per_job"] < 2000          # the 2 ms of each round's sleep are not counted


def test_bench_path_gap_is_refused_when_counting():
    run = subprocess.run([sys.executable, "-m", "leaseq.cli", "bench", "path", "--instructions", "--gap-us", "100"],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert run.returncode == 2 and "--gap-us" in run.stderr and "which a gap does not change" in run.stderr


def test_bench_path_lists_functions_only_when_counting():
    run = subprocess.run([sys.executable, "-m", "leaseq.cli", "bench", "path", "--functions", "5"],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert run.returncode == 2 and "--functions" in run.stderr and "needs --instructions" in run.stderr


def test_bench_path_refuses_an_unknown_load():
    run = subprocess.run([sys.executable, "-m", "leaseq.cli", "bench", "path", "--only", "w9"],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert run.returncode == 2 and "unknown load w9; choose from batches, single" in run.stderr


def test_bench_queue_reads_a_claim_reply_by_position_and_by_name(r):
    """The load generator reads (lease, payload) of each job of a real QCLAIM
    reply by position; a map in another order (a job with a KEY) is read by
    name, to the same pair."""
    from leaseq.bench.queue import LeaseqWire

    r.execute_command("QPUSH", "q", b"plain")
    r.execute_command("QPUSH", "q", b"keyed", "KEY", "k1")
    reply = r.execute_command("QCLAIM", "q", "w", "COUNT", 10)
    wire = LeaseqWire("q")
    got = wire.claimed(reply)
    by_name = [dict(zip(job[::2], job[1::2])) for job in reply]
    assert got == [(f[b"lease"], f[b"payload"]) for f in by_name]
    assert [p for _lease, p in got] == [b"plain", b"keyed"]
    shuffled = [job[4:] + job[:4] for job in reply]      # lease first: not the fixed order
    assert wire.claimed(shuffled) == got
    assert r.execute_command("QACK", "q", *[lease for lease, _p in got]) == 2


@pytest.mark.timeout(300)
def test_bench_floor_queue_counts_instructions_over_sockets(tmp_path):
    """--instructions: each server runs under callgrind and takes jobs in
    lockstep over real sockets; a job's count leaves out what the server
    runs idle, and its cache misses are counted with it."""
    from leaseq.bench import instructions
    out = tmp_path / "count.json"
    data = instructions.run("redis-server", str(out), kinds=("minimal", "leaseq"), jobs=20, idle_s=1.0,
                            functions=5, say=lambda _msg: None)
    assert json.loads(out.read_text())["results"].keys() == data["results"].keys() == {"minimal", "leaseq"}
    for kind, r in data["results"].items():
        assert r["jobs"] == 20, (kind, r)                                # every job pushed was claimed and acked
        assert r["instructions"] > r["i1_misses"] > 0 and r["d1_misses"] > 0, (kind, r)
        assert r["instructions"] == r["events_per_job"]["Ir"]
    leaseq = data["results"]["leaseq"]
    assert leaseq["idle_per_s"] > 0                                     # leaseq's timers tick while it idles,
    assert leaseq["instructions"] < leaseq["load_instructions"] / 20    # and what they ran is not a job's
    top = leaseq["functions"]               # leaseq's C functions with the most misses of their own, most first
    assert len(top) == 5 and "functions" not in data["results"]["minimal"]
    misses = [f["i1_misses"] + f["d1_misses"] for f in top]
    assert misses == sorted(misses, reverse=True) and misses[-1] > 0
    assert all(":" in f["function"] and 0 < f["instructions"] < leaseq["instructions"] / 2 for f in top)


@pytest.mark.timeout(300)
def test_bench_floor_instructions_with_several_parked_claims(tmp_path):
    """--claimers 3: three claims park on the queue, each push wakes one of
    them (whichever the server serves first), which acks and parks again;
    every job is claimed once and acked, none is left."""
    from leaseq.bench import instructions
    out = tmp_path / "count.json"
    data = instructions.run("redis-server", str(out), kinds=("leaseq",), jobs=12, idle_s=0.5,
                            say=lambda _msg: None, claimers=3)
    assert data["settings"]["claimers"] == 3 == json.loads(out.read_text())["settings"]["claimers"]
    r = data["results"]["leaseq"]
    assert r["jobs"] == 12 and r["instructions"] > r["i1_misses"] > 0 and r["d1_misses"] > 0


def test_bench_floor_instructions_needs_queue_and_valgrind(monkeypatch):
    for args, said in ((("--instructions",), "--instructions counts jobs: give it with --queue"),
                       (("--queue", "--instructions", "--rate", "50"), "--rate and --seconds do not apply"),
                       (("--queue", "--functions", "5"), "needs --instructions"),
                       (("--queue", "--claimers", "4"), "needs --instructions"),
                       (("--queue", "--instructions", "--claimers", "0"), "0 is not in the range 1<=x<=16")):
        run = subprocess.run([sys.executable, "-m", "leaseq.cli", "bench", "floor", *args],
                             capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert run.returncode == 2 and said in run.stderr, run.stderr
    from leaseq.bench import instructions
    monkeypatch.setattr(instructions.shutil, "which", lambda _name: None)
    with pytest.raises(RuntimeError, match=r"--instructions needs valgrind \(Debian package valgrind\)"):
        instructions.run("redis-server", None)


@pytest.mark.timeout(300)
def test_a_server_lost_under_callgrind_is_named_with_how_it_ended(tmp_path):
    """When a counted server dies during the load (here killed), the error
    says so and shows the end of its output (valgrind's lines included),
    which a bare "connection closed" would not."""
    from leaseq.bench import instructions
    server = instructions.Counted("minimal", str(tmp_path), None, None)
    try:
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait(60)
        said = server.ending()
    finally:
        server.stop()
    assert "exited with status -9" in said and "its output ends:" in said
    assert "Callgrind" in said or "valgrind" in said.lower()         # valgrind's banner, from its output


@pytest.mark.timeout(120)
def test_the_training_load_runs_each_workload_and_leaves_nothing(tmp_path, monkeypatch):
    """bench/training.py, the load bin/build-from-profile builds from, at its
    smallest: one run a workload and class, each daemon stopped, its
    directory removed."""
    import tempfile

    from leaseq.bench import training
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert training.train(jobs=500, seconds=0.3, workloads=("w1", "w3rate"), classes=("memory", "fsync")) == 4
    assert list(tmp_path.iterdir()) == []
