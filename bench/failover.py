"""``leaseq bench failover``: the failover soak (docs/replication.md, "The
failover soak").

Two leaseq nodes, a primary and its replica, with three Redis Sentinels
(``redis-server --sentinel``, unmodified; quorum 2, down-after 1 s) watching
them; a producer pushes numbered jobs through ``leaseq.client`` on a
``sentinel://`` URL, two workers claim and ack them, and an ``EVERY``
schedule with ``MISFIRE all`` fires on the primary.  Each cycle kills the
primary with SIGKILL; Sentinel promotes the replica; the killed node is
started again as a replica of the new primary (as the Kubernetes example's
start script does: it asks Sentinel first) and catches up; the load runs on.
At the end the producer stops, the workers drain the queue, and the soak
counts, over the whole run:

- ``pushes``: pushes the daemon answered with an id (acknowledged);
- ``lost``: of those, jobs no worker saw acked and the last primary does
  not hold as completed (an ack whose answer was cut by the kill lands,
  and its retry on the new primary answers 0: the job is completed there);
- ``acked back``: deliveries of a job after a worker's ack of it was
  answered 1;
- ``ticks twice`` / ``ticks missing``: schedule ticks present twice, and
  ticks between the first and the last that are not there;
- ``failover s``: from the kill to the first push the new primary answered.

With ``min-replicas-to-ack 1`` every answer waited for the replica's disk,
so lost and acked back must be 0; with 0 (asynchronous) the pushes answered
just before a kill may be lost, and the soak counts them beside the
replica's lag at the kill and the pushes answered in the second before
each kill (``at_risk``: a replica on the same machine is never a second
behind, so the loss stays under it).  ``tests/crash/test_failover_soak.py`` runs a
few cycles of each and checks those counts.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass, field

import redis
from leaseq.client import Queue, work
from leaseq.client.protocol import as_map

from .common import HOST, Daemon, free_port, print_grid, publish

SERVICE = "leaseq"
QUEUE, TICKS = "soak", "ticks"
LEASE_MS = 2_000            # a job whose worker vanished comes back soon
TICK_MS = 100
# Sentinel does not start a failover of a service within twice its failover-timeout of the
# previous one (each sentinel, from when it voted); a soak cycle is about 5 s, so 2.5 s
FAILOVER_TIMEOUT_MS = 2_500
PUSH_RATE = 400             # pushes a second, at most: the soak is about what a kill loses, not speed


def wait_until(predicate, timeout: float, what: str, interval: float = 0.02):
    """Poll ``predicate`` until it returns a true value (returned); a
    RuntimeError naming ``what`` at the timeout.  Redis errors count as
    not yet."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except redis.RedisError:
            value = None
        if value:
            return value
        time.sleep(interval)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")


def monitor_conf(primary_port: int, quorum: int = 1, down_after_ms: int = 1000,
                 failover_timeout_ms: int = 5000) -> str:
    """The lines of a sentinel.conf that watch ``SERVICE`` on a primary at
    ``primary_port`` on this machine."""
    return (f"sentinel monitor {SERVICE} {HOST} {primary_port} {quorum}\n"
            f"sentinel down-after-milliseconds {SERVICE} {down_after_ms}\n"
            f"sentinel failover-timeout {SERVICE} {failover_timeout_ms}\n")


class Sentinel:
    """One ``redis-server --sentinel`` configured by ``conf`` (the
    ``monitor_conf`` lines, or a whole sentinel.conf), on a free loopback
    port; its config file (which Sentinel rewrites) and log in
    ``directory``.  Stopped by its PID."""

    def __init__(self, directory: str, conf: str, redis_server: str = "redis-server") -> None:
        self.port = free_port()
        os.makedirs(directory, exist_ok=True)
        self.conf = os.path.join(directory, "sentinel.conf")
        with open(self.conf, "w") as f:        # the last port, bind and dir win over any in ``conf``
            f.write(f"{conf.rstrip()}\nport {self.port}\nbind {HOST}\ndir {directory}\n")
        self.log_path = os.path.join(directory, "sentinel.log")
        server = shutil.which(redis_server)
        if server is None:
            raise RuntimeError(f"{redis_server} is not installed (Debian's redis-server package runs Sentinel)")
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([server, self.conf, "--sentinel"], stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.client = redis.Redis(host=HOST, port=self.port, socket_timeout=10)
        wait_until(self.client.ping, 20, "the sentinel to answer")

    def primary(self) -> tuple[str, int]:
        host, port = self.client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
        return host.decode(), int(port)

    def healthy_replicas(self) -> set[int]:
        """The ports of the replicas this sentinel would promote (no
        down, disconnected or link-down flags)."""
        ports = set()
        for reply in self.client.execute_command("SENTINEL", "REPLICAS", SERVICE):
            entry = as_map(reply)
            flags = entry["flags"].decode().split(",")
            if flags == ["slave"] and entry["master-link-status"] == b"ok":
                ports.add(int(entry["port"]))
        return ports

    def events(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.client.close()
        self._log.close()


@dataclass
class Tally:
    """What the producer and the workers saw, shared between their threads."""

    answered: dict[int, tuple[int, float, float]] = field(default_factory=dict)  # number -> (id, sent, answered)
    acked: set[int] = field(default_factory=set)       # numbers whose ack a worker saw answered 1
    acked_back: int = 0
    deliveries: int = 0
    push_errors: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class Load:
    """A producer and ``workers`` workers on ``url`` until ``stop``; the
    workers go on until ``drained`` is set by ``drain``."""

    def __init__(self, url: str, tally: Tally, workers: int = 2) -> None:
        self.url = url
        self.tally = tally
        self.producing = threading.Event()
        self.working = threading.Event()
        self.producing.set()
        self.working.set()
        self.threads = [threading.Thread(target=self._produce, name="soak-producer", daemon=True)]
        self.threads += [threading.Thread(target=self._work, args=(f"w{i}",), name=f"soak-worker-{i}", daemon=True)
                         for i in range(workers)]
        for t in self.threads:
            t.start()

    def _produce(self) -> None:
        queue = Queue(self.url, QUEUE, socket_timeout=10)
        number, started = 0, time.monotonic()
        while self.producing.is_set():
            number += 1
            sent = time.monotonic()
            try:
                job_id = queue.push(str(number))
            except redis.RedisError:
                with self.tally.lock:
                    self.tally.push_errors += 1
                time.sleep(0.02)
                continue
            with self.tally.lock:
                self.tally.answered[number] = (job_id, sent, time.monotonic())
            ahead = number / PUSH_RATE - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
        queue.close()

    def _work(self, consumer: str) -> None:
        queue = Queue(self.url, QUEUE, socket_timeout=10)
        while self.working.is_set():
            try:
                jobs = queue.claim(consumer, count=20, lease_ms=LEASE_MS, block_ms=200)
            except redis.RedisError:
                time.sleep(0.05)
                continue
            for job in jobs:
                number = int(job.payload)
                with self.tally.lock:
                    self.tally.deliveries += 1
                    if number in self.tally.acked:
                        self.tally.acked_back += 1
                if self._ack(queue, job):
                    with self.tally.lock:
                        self.tally.acked.add(number)
        queue.close()

    @staticmethod
    def _ack(queue: Queue, job) -> bool:
        """Ack, tried again through passing faults for up to a lease, as
        ``leaseq.client.Worker`` does; True when it answered 1."""
        waits = work.settle_retry_waits(LEASE_MS)
        while True:
            try:
                return queue.ack(job)
            except redis.RedisError as e:
                if not waits or not work.is_passing(e):
                    return False
                time.sleep(waits.pop(0))

    def stop_producing(self) -> None:
        self.producing.clear()
        self.threads[0].join(30)

    def stop_working(self) -> None:
        self.working.clear()
        for t in self.threads[1:]:
            t.join(30)


@dataclass
class Cycle:
    at_risk: int               # pushes answered in the second before the kill
    promoted_s: float          # kill -> Sentinel names the new primary
    writes_s: float            # kill -> the first push the new primary answered
    lag_bytes: int             # how far the replica was behind, just before the kill


def soak(directory: str, cycles: int = 10, ack: int = 1, run_s: float = 2.0,
         redis_server: str = "redis-server") -> dict:
    """Run the soak in ``directory`` (its data, configs and logs); return
    the figures.  Every process it starts is stopped by PID."""
    base = ["--min-replicas-to-ack", str(ack)]
    os.makedirs(directory, exist_ok=True)
    nodes = [Daemon(os.path.join(directory, f"node{i}"), os.path.join(directory, f"node{i}.log"), args=tuple(base))
             for i in range(2)]
    sentinels: list[Sentinel] = []
    load = None
    tally = Tally()
    done: list[Cycle] = []
    try:
        primary, replica = nodes
        primary.start(timeout=60)
        replica.args = base + ["--replicaof", f"{HOST} {primary.port}"]
        replica.start(timeout=60)
        wait_until(lambda: replica.info("replication").get("master_link_status") == "up", 30, "the replica's link")
        with primary.client() as c:
            c.execute_command("QCREATE", QUEUE, "RETAIN-COMPLETED", 3_600_000, "MAXDELIVERIES", 1000)
            c.execute_command("QSCHEDULE", TICKS, "beat", "tick", "EVERY", TICK_MS, "MISFIRE", "all")
        conf = monitor_conf(primary.port, quorum=2, failover_timeout_ms=FAILOVER_TIMEOUT_MS)
        sentinels = [Sentinel(os.path.join(directory, f"sentinel{i}"), conf, redis_server) for i in range(3)]
        url = "sentinel://" + ",".join(f"{HOST}:{s.port}" for s in sentinels) + f"/{SERVICE}"
        load = Load(url, tally)
        for _ in range(cycles):
            while True:
                primary, replica = wait_until(lambda: _settled(nodes, sentinels), 90,
                                              "the sentinels to agree on a primary and see its replica healthy")
                time.sleep(run_s)
                if _settled(nodes, sentinels) == (primary, replica):
                    break                    # (else Sentinel failed over meanwhile by itself: settle again)
            lag = _lag_bytes(primary)
            killed_at = time.monotonic()
            primary.kill()
            new = wait_until(lambda: replica if sentinels[0].primary() == (HOST, replica.port) else None, 60,
                             "Sentinel to promote the replica")
            promoted_at = time.monotonic()
            primary.args = base + ["--replicaof", f"{HOST} {new.port}"]    # as the k8s start script: ask Sentinel
            primary.start(timeout=60, port=primary.port)
            answered = wait_until(lambda: _answered_since(tally, killed_at), 60, "a push answered by the new primary")
            with tally.lock:
                at_risk = sum(1 for _, _, when in tally.answered.values() if killed_at - 1 < when <= killed_at)
            done.append(Cycle(at_risk, promoted_at - killed_at, answered - killed_at, lag))
        primary, _ = wait_until(lambda: _settled(nodes, sentinels), 90, "the sentinels to agree on a primary")
        time.sleep(run_s)
        load.stop_producing()
        wait_until(lambda: _drained(primary), 120, "the workers to drain the queue")
        load.stop_working()
        with primary.client() as c:
            figures = _figures(c, tally, done, cycles, ack)
        figures["failovers"] = sentinels[0].events().count("+switch-master")
        return figures
    finally:
        if load is not None:
            load.stop_producing()
            load.stop_working()
        for s in sentinels:
            s.stop()
        for node in nodes:
            node.kill()


def _settled(nodes: list[Daemon], sentinels: list[Sentinel]) -> tuple[Daemon, Daemon] | None:
    """(primary, replica) once every sentinel names the same primary and
    sees the other node as a healthy replica; None until then.  Sentinel
    may fail over more often than the soak kills (a node that does not
    answer its PING within down-after, on a busy machine), so the soak asks
    it which node is which rather than assuming."""
    named = {s.primary() for s in sentinels}
    if len(named) != 1:
        return None
    by_port = {n.port: n for n in nodes}
    primary = by_port.get(named.pop()[1])
    if primary is None:
        return None
    replica = next(n for n in nodes if n is not primary)
    if not all(replica.port in s.healthy_replicas() for s in sentinels):
        return None
    if primary.info("replication").get("role") != "master":
        return None
    return primary, replica


def _lag_bytes(primary: Daemon) -> int:
    info = primary.info("replication")
    offsets = [int(info[k]["offset"]) for k in info if k.startswith("slave") and k[5:].isdigit()]
    return int(info["master_repl_offset"]) - min(offsets, default=0)


def _answered_since(tally: Tally, moment: float) -> float | None:
    """When the first push sent after ``moment`` was answered (None: none
    yet).  Sent, not answered: a push in flight at the kill may be answered
    by the dying primary a moment after it."""
    with tally.lock:
        last = next(reversed(tally.answered.values()), None)
        if last is None or last[1] <= moment:
            return None
        return min(answered for _, sent, answered in tally.answered.values() if sent > moment)


def _drained(primary: Daemon) -> bool:
    with primary.client() as c:
        info = as_map(c.execute_command("QINFO", QUEUE))
    return info["ready"] + info["delayed"] + info["in_flight"] == 0


def _figures(c: redis.Redis, tally: Tally, cycles: list[Cycle], wanted: int, ack: int) -> dict:
    lost = []
    for number, (job_id, _, _) in tally.answered.items():
        if number in tally.acked:
            continue
        job = c.execute_command("QGET", QUEUE, job_id)
        held = as_map(job) if job else {}
        if held.get("payload") != str(number).encode() or held.get("state") != b"completed":
            lost.append(number)
    ticks = [as_map(j)["tick"] for j in _scan(c, TICKS)]
    return {
        "ack": ack, "cycles": len(cycles), "cycles_wanted": wanted,
        "pushes": len(tally.answered), "push_errors": tally.push_errors, "deliveries": tally.deliveries,
        "acked": len(tally.acked), "lost": len(lost), "lost_numbers": lost[:20], "acked_back": tally.acked_back,
        "ticks": len(ticks), "ticks_twice": len(ticks) - len(set(ticks)),
        "ticks_missing": len(set(range(min(ticks), max(ticks) + 1, TICK_MS)) - set(ticks)) if ticks else 0,
        "promoted_s": [round(x.promoted_s, 2) for x in cycles],  # "failovers" (Sentinel's count) is added by soak
        "failover_s": [round(x.writes_s, 2) for x in cycles],
        "lag_bytes": [x.lag_bytes for x in cycles],
        "at_risk": sum(x.at_risk for x in cycles),
    }


def _scan(c: redis.Redis, queue: str) -> list:
    cursor, out = 0, []
    while True:
        cursor, jobs = c.execute_command("QSCAN", queue, cursor, "COUNT", 10_000)
        out += jobs
        if int(cursor) == 0:
            return out


def run(cycles: int, acks: list[int], run_s: float, directory: str | None, redis_server: str,
        json_path: str | None) -> dict:
    """The soak once for each ``min-replicas-to-ack`` in ``acks``; print a
    table and return the figures by ack."""
    import tempfile
    results = {}
    for ack in acks:
        with tempfile.TemporaryDirectory(prefix=f"leaseq-failover-{ack}-", dir=directory) as d:
            results[ack] = soak(d, cycles=cycles, ack=ack, run_s=run_s, redis_server=redis_server)
    return publish(results, _report, json_path)


def _report(results: dict) -> None:
    rows = []
    for ack, r in results.items():
        f = r["failover_s"]
        rows.append([f"min-replicas-to-ack {ack}", r["cycles"], r["failovers"], r["pushes"], r["lost"], r["acked_back"],
                     r["ticks_twice"], r["ticks_missing"], f"{statistics.median(f):.2f}" if f else "-",
                     f"{max(f):.2f}" if f else "-", max(r["lag_bytes"], default=0), r["at_risk"]])
    print_grid("failover soak: primary + replica + 3 sentinels, kill -9 of the primary each cycle",
               ["mode", "kills", "failovers", "pushes", "lost", "acked back", "ticks twice", "ticks missing",
                "failover s median", "max", "lag at kill (bytes, max)", "answered 1 s before kills"], rows,
               right=set(range(1, 12)))
