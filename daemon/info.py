"""INFO: its sections, each field read from the part of the daemon that
holds it, and the samples ``instantaneous_ops_per_sec`` is computed from.

``Info.sections`` is what ``Server.info_sections`` answers (INFO, the status
page); ``sample`` runs every ``SAMPLE_EVERY`` seconds (``Server.listen``
starts it) and keeps the command count of the last 16 samples.
"""

from __future__ import annotations

import os
import time
from collections import deque

from leaseq.commands.connection import VERSION
from leaseq.storage import flow, queries

from . import flavour
from .process import human_bytes, os_line, peak_rss_bytes, rss_bytes

SAMPLE_EVERY = 0.1


class Info:
    def __init__(self, server) -> None:
        self.server = server
        self.started_at = time.time()
        self.loading_started = int(self.started_at)
        self._ops_samples: deque = deque(maxlen=16)      # (monotonic seconds, commands processed)

    def sample(self) -> None:
        self._ops_samples.append((time.monotonic(), self.server.stats.commands))

    def clear_samples(self) -> None:
        """CONFIG RESETSTAT: the rate starts again from the next samples."""
        self._ops_samples.clear()

    def ops_per_sec(self) -> int:
        if len(self._ops_samples) < 2:
            return 0
        (t0, c0), (t1, c1) = self._ops_samples[0], self._ops_samples[-1]
        return int((c1 - c0) / (t1 - t0)) if t1 > t0 else 0

    def sections(self) -> dict[str, list[tuple[str, object]]]:
        """INFO's sections, each field from the part that holds it."""
        server = self.server
        s = server.settings
        store = server.store
        listeners = server.listeners
        uptime = int(time.time() - self.started_at)
        rss = rss_bytes()
        queues = store.queues.values()
        stats = server.stats
        now = server.now_ms()
        return {
            "server": [
                ("leaseq_version", VERSION),
                ("leaseq_flavour", flavour.FLAVOUR),
                ("leaseq_profile_guided", int(flavour.PROFILE_GUIDED)),
                ("leaseq_mode", "standalone"),
                ("os", os_line()),
                ("process_id", os.getpid()),
                ("run_id", server.replication.run_id),
                ("tcp_port", listeners.port),
                ("tls_port", listeners.tls_port),
                ("bind", s.bind),
                ("uptime_in_seconds", uptime),
                ("uptime_in_days", uptime // 86400),
                ("executable", "leaseq"),
                *server.shutdown.info_fields(),
            ],
            "clients": [
                ("connected_clients", len(server.clients)),
                ("blocked_clients", (server.blocking.count() if server.blocking else 0) + server.pause.count()
                 + len(server.shutdown.asked)),        # (parked claims and WAITs, held commands, SHUTDOWNs)
                ("maxclients", s.maxclients),
            ],
            "memory": [
                ("used_memory", rss),                   # Python has no cheap allocator total: the RSS
                ("used_memory_human", human_bytes(rss)),
                ("used_memory_rss", rss),
                ("used_memory_peak", peak_rss_bytes()),
                ("maxmemory", s.maxmemory),
                ("jobs_live", sum(len(q.jobs) for q in queues)),
            ],
            "persistence": self._persistence(),
            "replication": server.replication.info_fields(),
            "stats": [
                ("total_connections_received", stats.connections),
                ("total_commands_processed", stats.commands),
                ("instantaneous_ops_per_sec", self.ops_per_sec()),
                ("total_jobs_pushed", sum(q.counters.pushed for q in queues)),
                ("total_jobs_acked", sum(q.counters.acked for q in queues)),
                ("rejected_connections", stats.rejected),
                ("protocol_errors", stats.protocol_errors),
                ("acl_access_denied_auth", stats.acl_access_denied_auth),
                ("acl_access_denied_cmd", stats.acl_access_denied_cmd),
                ("acl_access_denied_key", stats.acl_access_denied_key),
                ("tls_handshake_failures", stats.tls_handshake_failures),
            ],
            "queues": [(q.name.decode(), self._queue_line(q, now)) for q in sorted(queues, key=lambda q: q.name)],
            # Redis's: tools (redis-cli --stat, exporters) count keys here; a key is a queue
            "keyspace": [("db0", f"keys={len(store.queues)},expires=0,avg_ttl=0")] if store.queues else [],
        }

    @staticmethod
    def _queue_line(q, now: int) -> str:
        """A queue's counts (``queries.summary``); for a queue that sets
        RATE, CONCURRENCY, a group rule or a pause, its ``paused`` and
        ``throttled``; for a queue with groups, ``groups``."""
        line = queries.summary(q)
        if flow.limited(q):
            line += f",paused={int(q.config.paused)},throttled={flow.throttled(q, now)}"
        if q.indexes.groups is not None:
            line += f",groups={queries.group_count(q)}"
        return line

    def _persistence(self) -> list[tuple[str, object]]:
        server = self.server
        s = server.settings
        if server.loading:
            return [("loading", 1), ("loading_start_time", self.loading_started),
                    ("loading_elapsed_ms", int((time.time() - self.loading_started) * 1000)),
                    ("dir", os.path.abspath(s.dir))]
        return [("loading", 0)] + server.disk.info_fields() + server.datadir.info_fields() \
            + server.committer.info_fields() + [
            ("default_durability", s.default_durability),
            ("lease_durability", s.lease_durability),
            ("fsync_interval_ms", s.fsync_interval),
        ] + server.snapshots.info_fields()
