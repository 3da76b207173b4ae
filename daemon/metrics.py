"""Prometheus metrics, in the text format prometheus-client writes.

Most figures are read from the daemon's state when Prometheus scrapes
(``Collector.collect``): queue counts and counters, the age of each queue's
oldest ready job, connected clients, the log's size and whether it can be
written.  Nothing is kept per command for them, so serving pays nothing.
Two histograms are observed as things happen, with a fixed bucket list and
plain integer counts (``Histogram.observe``: a bisect and two additions):
command duration per command name, and the log's fsync duration.

=========================================  ======  ==========================
metric                                     type    labels
=========================================  ======  ==========================
leaseq_queue_jobs                          gauge   queue, state (ready,
                                                   delayed, in_flight, dead,
                                                   completed)
leaseq_queue_throttled                     gauge   queue, reason (pause,
                                                   concurrency, rate,
                                                   group-pause,
                                                   group-concurrency,
                                                   group-rate)
leaseq_queue_groups                        gauge   queue
leaseq_queue_oldest_ready_age_seconds      gauge   queue
leaseq_schedule_fired_total                counter queue, schedule
leaseq_schedule_skipped_total              counter queue, schedule
leaseq_queue_pushed_total                  counter queue
leaseq_queue_acked_total                   counter queue
leaseq_queue_nacked_total                  counter queue
leaseq_queue_dead_lettered_total           counter queue
leaseq_queue_lease_expired_total           counter queue
leaseq_command_duration_seconds            hist.   command
leaseq_wal_fsync_duration_seconds          hist.
leaseq_wal_bytes                           gauge   (records in the segment files)
leaseq_wal_writable                        gauge   (1, or 0 during a disk
                                                   fault)
leaseq_wal_write_errors_total              counter (disk faults since start)
leaseq_connected_clients                   gauge
=========================================  ======  ==========================
"""

from __future__ import annotations

import time
from collections import defaultdict

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import CollectorRegistry

from leaseq.storage import flow, queries
from leaseq.storage.wal import list_segments, sizes_of

# seconds; the last bucket is +Inf
BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
COUNTERS = ("pushed", "acked", "nacked", "dead_lettered", "lease_expired")


class Histogram:
    """Counts per bucket, a sum and a count: what Prometheus needs."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        i = 0
        for bound in BUCKETS:        # (the first bound not below it: most durations are under the first few)
            if bound >= seconds:
                break
            i += 1
        self.counts[i] += 1
        self.total += seconds

    def buckets(self) -> list[tuple[str, int]]:
        out, running = [], 0
        for bound, n in zip(BUCKETS + (float("inf"),), self.counts):
            running += n
            out.append(("+Inf" if bound == float("inf") else repr(bound), running))
        return out


class Metrics:
    __slots__ = ("server", "commands", "fsync", "registry")

    def __init__(self, server) -> None:
        self.server = server
        self.commands: defaultdict[str, Histogram] = defaultdict(Histogram)   # name -> durations, once it ran
        self.fsync = Histogram()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def command(self, name: str, seconds: float) -> None:
        """A command named ``name`` took ``seconds``."""
        histogram = self.commands[name]
        histogram.observe(seconds)

    def collect(self):
        server = self.server
        queues = sorted(server.store.queues.values(), key=lambda q: q.name)
        jobs = GaugeMetricFamily("leaseq_queue_jobs", "Jobs in a queue, by state.", labels=["queue", "state"])
        totals = {c: CounterMetricFamily(f"leaseq_queue_{c}", f"Jobs {c.replace('_', ' ')} since the queue was made.",
                                         labels=["queue"]) for c in COUNTERS}
        throttled = GaugeMetricFamily("leaseq_queue_throttled",
                                      "Ready jobs no claim could take now, by the rule holding them back.",
                                      labels=["queue", "reason"])
        groups = GaugeMetricFamily("leaseq_queue_groups", "Groups holding live jobs in a queue.", labels=["queue"])
        oldest = GaugeMetricFamily("leaseq_queue_oldest_ready_age_seconds",
                                   "Time the oldest ready job has waited since it was pushed (0 if none is ready).",
                                   labels=["queue"])
        now = server.now_ms()
        for q in queues:
            name = q.name.decode(errors="replace")
            for state, n in q.indexes.counts().items():
                jobs.add_metric([name, state], n)
            for reason, n in flow.throttled_by(q, now).items():
                throttled.add_metric([name, reason], n)
            groups.add_metric([name], queries.group_count(q))
            oldest.add_metric([name], queries.oldest_ready_age(q, now) / 1000)   # on the daemon's clock, as QINFO
            for c in COUNTERS:
                totals[c].add_metric([name], getattr(q.counters, c))
        yield jobs
        yield throttled
        yield groups
        yield oldest
        fired = CounterMetricFamily("leaseq_schedule_fired", "Jobs a schedule pushed (docs/semantics.md 3.9).",
                                    labels=["queue", "schedule"])
        skipped = CounterMetricFamily("leaseq_schedule_skipped", "Ticks of a schedule that pushed no job.",
                                      labels=["queue", "schedule"])
        for q in queues:
            for s in sorted(q.schedules.values(), key=lambda s: s.name):
                labels = [q.name.decode(errors="replace"), s.name.decode(errors="replace")]
                fired.add_metric(labels, s.fired)
                skipped.add_metric(labels, s.skipped)
        yield fired
        yield skipped
        yield from totals.values()
        durations = HistogramMetricFamily("leaseq_command_duration_seconds",
                                          "Time to run a command (not counting the wait for fsync).",
                                          labels=["command"])
        for name in sorted(self.commands):
            h = self.commands[name]
            durations.add_metric([name], h.buckets(), h.total)
        yield durations
        fsync = HistogramMetricFamily("leaseq_wal_fsync_duration_seconds", "Time one fsync of the log took.")
        fsync.add_metric([], self.fsync.buckets(), self.fsync.total)
        yield fsync
        size = 0
        if server.datadir is not None:
            wal = server.datadir.wal
            size = (wal.segments_and_bytes()[1] if wal is not None     # (None during a disk fault)
                    else sum(sizes_of(p for _n, p in list_segments(server.datadir.directory))))
        yield GaugeMetricFamily("leaseq_wal_bytes", "Bytes of records in the log's segment files.", value=size)
        disk = server.disk
        yield GaugeMetricFamily("leaseq_wal_writable", "1 while the log can be written, 0 during a disk fault "
                                "(INFO's log_write_status).", value=0 if server.disk_error is not None else 1)
        yield CounterMetricFamily("leaseq_wal_write_errors", "Disk faults since start: a write or fsync of the "
                                  "log failed and writes stopped until the disk took them again.",
                                  value=disk.entered)
        yield GaugeMetricFamily("leaseq_connected_clients", "Client connections open.", value=len(server.clients))
        yield from replication_metrics(server.replication)


def replication_metrics(r):
    """What /metrics shows of replication (``Replication``, daemon/replication.py)."""
    link = r.link
    yield GaugeMetricFamily("leaseq_replication_replica", "1 on a replica, 0 on a primary (INFO's role).",
                            value=int(r.master is not None))
    yield GaugeMetricFamily("leaseq_replication_link_up", "On a replica, 1 while its link to the primary "
                            "streams (INFO's master_link_status); on a primary, 1.",
                            value=int(r.master is None or (link is not None and link.up)))
    yield GaugeMetricFamily("leaseq_replication_offset_bytes", "Bytes of the replication stream this node "
                            "holds (INFO's master_repl_offset).", value=r.offset)
    yield GaugeMetricFamily("leaseq_replication_connected_replicas", "Replicas of this node (INFO's "
                            "connected_slaves).", value=len(r.replicas.peers))
    now = time.monotonic()
    lag = GaugeMetricFamily("leaseq_replication_replica_lag_seconds", "Seconds since the replica's last "
                            "acknowledgement.", labels=["replica"])
    behind = GaugeMetricFamily("leaseq_replication_replica_lag_bytes", "Bytes of the stream the replica has "
                               "not acknowledged as on its disk.", labels=["replica"])
    for p in r.replicas.peers:
        lag.add_metric([f"{p.ip}:{p.port}"], now - p.ack_time)
        behind.add_metric([f"{p.ip}:{p.port}"], max(0, r.offset - p.ack_offset))
    yield lag
    yield behind
