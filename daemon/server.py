"""The server: listener, clients, clock, settings and orderly shutdown.

Commands reach the daemon's state only through this object (``client.server``
in the handlers), as ``commands.context.ServerContext`` describes: the store,
the settings, ``now_ms()``, the client registry and a few services (CONFIG,
INFO, shutdown, blocked claimers).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import time
from collections import deque
from dataclasses import dataclass

from leaseq.commands import errors
from leaseq.commands.acl import Acl
from leaseq.commands.connection import VERSION
from leaseq.commands.table import TABLE
from leaseq.commands.replies import Error
from leaseq.storage.datadir import DataDir
from leaseq.storage import queries
from leaseq.storage.config import QueueConfig
from leaseq.storage.store import Store
from leaseq.storage.wal import Faults, MemoryLog

from . import config, tls
from .blocking import Blocking
from .clock import Clock
from .committer import Committer
from .connection import Connection
from .faults import DiskFaults
from .http import HttpListener
from .metrics import Metrics
from .process import human_bytes, keep_old_objects_out_of_collections, os_line, peak_rss_bytes, rss_bytes
from .protected import binds_beyond_loopback, protected_mode_refuses
from .snapshots import Snapshots
from .resp import encode

log = logging.getLogger(__name__)


@dataclass
class Stats:
    connections: int = 0
    commands: int = 0
    rejected: int = 0
    protocol_errors: int = 0
    acl_access_denied_auth: int = 0     # AUTH/HELLO with a wrong user or password
    acl_access_denied_cmd: int = 0      # -NOPERM for a command
    acl_access_denied_key: int = 0      # -NOPERM for a queue
    tls_handshake_failures: int = 0


class Server:
    """Listens at once and answers -LOADING until ``attach`` hands it the
    recovered data directory (docs/operations.md, "Starting")."""

    def __init__(self, settings: config.Settings) -> None:
        self.settings = settings
        self.acl = Acl(TABLE, settings.users, settings.requirepass)   # users and permissions
        self.datadir: DataDir | None = None
        self.loading = True
        self.loading_started = int(time.time())
        self.store = Store()          # empty stand-ins until recovery is done; while loading
        self.wal = MemoryLog()        # no command that writes is run, so nothing reaches them
        self.clients: dict[int, Connection] = {}
        self.next_client_id = 1
        self.stats = Stats()
        self.started_at = time.time()
        self.port = settings.port
        self.tls_port = 0                        # 0: no TLS listener
        self.oom = False
        self.disk = DiskFaults(self)             # a log that cannot be written (daemon/faults.py)
        self.metrics = Metrics(self)             # what /metrics shows (daemon/metrics.py)
        self.http: HttpListener | None = None
        self.http_port = 0
        self.faults = Faults()                   # DEBUG FAULT: errors the log pretends to get
        self.stopping = False
        self.clock = Clock(0, False, 0, on_change=self._clock_changed)
        self.now_ms = self.clock.now
        self._ops_samples: deque = deque(maxlen=16)
        self._stopped: asyncio.Event | None = None
        self._listener = None
        self._tls_listener: tls.TlsListener | None = None
        self._tasks: list = []
        self.loop = None
        self.blocking: Blocking | None = None
        self.committer: Committer | None = None
        self.snapshots: Snapshots | None = None

    def attach(self, datadir: DataDir) -> None:
        """Recovery is done: serve the recovered store from now on."""
        s = self.settings
        self.datadir = datadir
        self.store = store = datadir.store
        self.wal = datadir.wal
        self._apply_settings()
        self.clock = Clock(*store.clock, on_change=self._clock_changed)
        self.now_ms = self.clock.now
        if self.clock.frozen and not s.enable_debug_command:
            # a test froze time in this data directory; without DEBUG nobody could resume it
            log.warning("the log holds a frozen DEBUG clock and enable-debug-command is no: resuming it")
            self.clock.resume()
        self.committer.resumed(datadir.wal)
        datadir.faults = datadir.wal.faults = self.faults
        self.snapshots = Snapshots(self, self.loop)
        self.loading = False
        log.info("leaseq ready to serve on %s (data directory %s)", self._addresses(), s.dir)
        if self.stopping:                    # a shutdown asked for while loading
            self.loop.call_soon(self._shutdown)

    def serve_store(self, store) -> None:
        """The store rebuilt from disk after a disk fault takes over."""
        self.store = store
        self._apply_settings()

    def serve_log(self, wal) -> None:
        """Writing resumed after a disk fault: this log takes the records."""
        self.wal = wal
        self.committer.resumed(wal)
        self._apply_settings()

    def spawn(self, coroutine) -> None:
        """Run a background task that stops with the server."""
        self._tasks.append(self.loop.create_task(coroutine))

    # -- clock and settings --------------------------------------------------------------

    def _clock_changed(self, offset: int, frozen: bool, frozen_at: int) -> None:
        """DEBUG moved the clock: log it, then fold and re-arm every queue
        someone waits on."""
        self.store.set_clock(offset, frozen, frozen_at)
        if self.blocking is not None:
            self.blocking.time_moved()

    @property
    def disk_error(self) -> OSError | None:
        """Why the log cannot be written (commands that change queues get
        -MISCONF meanwhile), or None."""
        return self.disk.error

    def _apply_settings(self) -> None:
        """Settings the store and the data directory hold copies of."""
        s = self.settings
        d = self.datadir
        d.lease_sync = self.store.journal.lease_sync = s.lease_durability == "fsync"
        d.segment_size = s.segment_size
        d.archive_dir = s.archive_dir
        self.store.default_config = QueueConfig(durability=s.default_durability)
        if d.wal is not None:
            d.wal.set_segment_size(s.segment_size)

    @property
    def auth_required(self) -> bool:
        return self.acl.auth_required

    def default_user_has_no_password(self) -> bool:
        """What protected mode asks (Redis: the default user is ``nopass``;
        requirepass or a ``user default`` line with a password ends that)."""
        return self.acl.default.nopass

    def config_items(self) -> list[tuple[str, str]]:
        s = self.settings
        return [(name, config.render(name, s.get(name))) for name in config.FIELDS] + config.redis_views(s)

    def config_set(self, pairs: list[tuple[str, str]]) -> None:
        changes = {}
        for name, text in pairs:
            f = config.FIELDS.get(name)
            if name in config.REDIS_VIEWS:
                raise errors.config_immutable(name)
            if f is None:
                raise errors.config_unknown(name)
            if not f.metadata["mutable"]:
                raise errors.config_immutable(name)
            try:
                changes[config.attr_name(name)] = config.parse_value(name, text)
            except config.ConfigError as e:
                raise errors.config_invalid(name, str(e)) from None
        self.settings = s = self.settings.replace(**changes)
        if "requirepass" in changes:        # Redis: requirepass is the default user's password
            self.acl = Acl(TABLE, s.users, s.requirepass)
        if self.datadir is not None:
            self._apply_settings()
        for c in self.clients.values():
            c.parser.max_args = s.max_args
            c.parser.max_bulk = s.proto_max_bulk_len
        if "loglevel" in changes:
            logging.getLogger("leaseq").setLevel(self.settings.loglevel.upper())

    # -- clients ------------------------------------------------------------------------------

    def register(self, conn: Connection) -> None:
        """A new connection (on the TLS port: once its handshake is done) is
        served, or answered one error and closed without touching anyone else."""
        self.stats.connections += 1
        refusal = self._refusal(conn)
        if refusal is not None:
            self.stats.rejected += 1
            conn.transport.write(encode(refusal, False))
            conn.transport.close()
            conn.closed = True
            return
        conn.id = self.next_client_id
        self.next_client_id += 1
        self.clients[conn.id] = conn

    def _refusal(self, conn: Connection) -> Error | None:
        """Why a new connection is not served, in Redis's order: shutting
        down, maxclients, then protected mode (daemon/protected.py)."""
        if self.stopping:
            return errors.SHUTTING_DOWN
        if len(self.clients) >= self.settings.maxclients:
            return errors.MAX_CLIENTS
        peer = conn.transport.get_extra_info("peername")
        host = peer[0] if isinstance(peer, tuple) else None
        if protected_mode_refuses(self.settings.protected_mode, self.default_user_has_no_password(), host):
            return errors.DENIED
        return None

    def tls_handshake_failed(self, addr: str, reason: str) -> None:
        """A client's TLS handshake failed (plain text on the TLS port, no or
        a wrong certificate): one line and a count, never a traceback; the
        socket is closed already."""
        self.stats.tls_handshake_failures += 1
        log.info("TLS handshake with %s failed: %s", addr, reason)

    def unregister(self, conn: Connection) -> None:
        self.clients.pop(conn.id, None)
        if self.committer is not None:
            self.committer.waiters.discard(conn)

    def blocked_on(self, queue) -> int:
        return self.blocking.count(queue)

    def queue_dropped(self, queue) -> None:
        self.blocking.queue_dropped(queue)

    def bgsave(self, schedule: bool) -> str:
        return self.snapshots.bgsave(schedule)

    def lastsave(self) -> int:
        return self.snapshots.last_time if self.snapshots else 0

    def ops_per_sec(self) -> int:
        if len(self._ops_samples) < 2:
            return 0
        (t0, c0), (t1, c1) = self._ops_samples[0], self._ops_samples[-1]
        return int((c1 - c0) / (t1 - t0)) if t1 > t0 else 0

    def reset_stats(self) -> None:
        self.stats = Stats()
        self._ops_samples.clear()

    # -- INFO -----------------------------------------------------------------------------------

    def info_sections(self) -> dict[str, list[tuple[str, object]]]:
        """INFO's sections, each field from the part that holds it."""
        s = self.settings
        store = self.store
        uptime = int(time.time() - self.started_at)
        rss = rss_bytes()
        queues = store.queues.values()
        stats = self.stats
        return {
            "server": [
                ("leaseq_version", VERSION),
                ("leaseq_mode", "standalone"),
                ("os", os_line()),
                ("process_id", os.getpid()),
                ("tcp_port", self.port),
                ("tls_port", self.tls_port),
                ("bind", s.bind),
                ("uptime_in_seconds", uptime),
                ("uptime_in_days", uptime // 86400),
                ("executable", "leaseq"),
            ],
            "clients": [
                ("connected_clients", len(self.clients)),
                ("blocked_clients", self.blocking.count() if self.blocking else 0),
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
            "queues": [(q.name.decode(), queries.summary(q)) for q in sorted(queues, key=lambda q: q.name)],
            # Redis's: tools (redis-cli --stat, exporters) count keys here; a key is a queue
            "keyspace": [("db0", f"keys={len(store.queues)},expires=0,avg_ttl=0")] if store.queues else [],
        }

    def _persistence(self) -> list[tuple[str, object]]:
        s = self.settings
        if self.loading:
            return [("loading", 1), ("loading_start_time", self.loading_started),
                    ("loading_elapsed_ms", int((time.time() - self.loading_started) * 1000)),
                    ("dir", os.path.abspath(s.dir))]
        return [("loading", 0)] + self.disk.info_fields() + self.datadir.info_fields() \
            + self.committer.info_fields() + [
            ("default_durability", s.default_durability),
            ("lease_durability", s.lease_durability),
            ("fsync_interval_ms", s.fsync_interval),
        ] + self.snapshots.info_fields()

    # -- running --------------------------------------------------------------------------------

    async def listen(self) -> None:
        """Open the port; until ``attach`` every command but the few flagged
        ``loading`` is answered -LOADING."""
        loop = asyncio.get_running_loop()
        self.loop = loop
        self._stopped = asyncio.Event()
        self.blocking = Blocking(self, loop)
        self.committer = Committer(self, loop)
        s = self.settings
        context = tls.server_context(s) if s.tls_port else None
        self._listener = await loop.create_server(lambda: Connection(self), s.bind, s.port,
                                                  reuse_address=True, backlog=511)
        self.port = self._listener.sockets[0].getsockname()[1]
        if context is not None:
            self._listen_tls(context)
        if s.http_port:
            self.http = HttpListener(self)
            self.http_port = await self.http.start(s.http_bind, s.http_port)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_shutdown, f"signal {signal.Signals(sig).name}")
        self._tasks.append(loop.create_task(self._fsync_ticker()))
        self._tasks.append(loop.create_task(self._every(0.1, self._housekeeping)))
        self._warn_if_reachable_without_password()
        log.info("leaseq listening on %s; recovering data directory %s", self._addresses(), s.dir)

    def _listen_tls(self, context) -> None:
        """The TLS listener: each accepted socket handshakes first, then
        becomes a ``Connection`` like any other (daemon/tls.py)."""
        self._tls_listener = tls.TlsListener(self, context, lambda: Connection(self))
        self.tls_port = self._tls_listener.start(self.tls_bind, self.settings.tls_port)

    @property
    def tls_bind(self) -> str:
        return self.settings.tls_bind or self.settings.bind

    def _addresses(self) -> str:
        """Where clients reach the daemon, for the log."""
        where = f"{self.settings.bind}:{self.port}"
        return f"{where} and TLS on {self.tls_bind}:{self.tls_port}" if self.tls_port else where

    def _warn_if_reachable_without_password(self) -> None:
        """Other hosts can reach a port and the default user has no password:
        say what protected mode does about it (or that it is off)."""
        binds = [self.settings.bind] + ([self.tls_bind] if self.tls_port else [])
        reachable = sorted({b for b in binds if binds_beyond_loopback(b)})
        if not reachable or not self.default_user_has_no_password():
            return
        if self.settings.protected_mode:
            log.warning("listening on %s without requirepass: protected mode answers clients on other hosts "
                        "-DENIED. Set requirepass to serve them.", " and ".join(reachable))
        else:
            log.warning("listening on %s without requirepass and with protected-mode no: any host that reaches "
                        "this port can use every queue. Set requirepass or bind 127.0.0.1.", " and ".join(reachable))

    async def _fsync_ticker(self) -> None:
        """Async queues: fsync at least every fsync-interval (read each time,
        so CONFIG SET applies at once)."""
        while True:
            await asyncio.sleep(max(self.settings.fsync_interval, 1) / 1000.0)
            self.committer.sync_interval_tick()

    async def _every(self, seconds: float, fn) -> None:
        while True:
            await asyncio.sleep(seconds)
            fn()

    def _housekeeping(self) -> None:
        now = time.monotonic()
        self._ops_samples.append((now, self.stats.commands))
        s = self.settings
        if s.maxmemory:
            self.oom = rss_bytes() > s.maxmemory
        elif self.oom:
            self.oom = False
        if s.timeout:
            for c in list(self.clients.values()):
                if c.waiting is None and now - c.last_active > s.timeout:
                    log.info("closing idle client id=%d addr=%s", c.id, c.addr)
                    c.kill()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    def request_shutdown(self, reason: str) -> None:
        if self.stopping:
            return
        self.stopping = True
        if self.loading:
            log.info("shutting down (%s) once recovery is done", reason)
            return
        log.info("shutting down (%s)", reason)
        self.loop.call_soon(self._shutdown)

    def _stop_listening(self) -> None:
        """Close every listener and drop the TLS handshakes still running."""
        self._listener.close()
        if self._tls_listener is not None:
            self._tls_listener.close()
        if self.http is not None:
            self.http.close()

    def abort(self) -> None:
        """Recovery failed: close the port and every connection."""
        self._stop_listening()
        for task in self._tasks:
            task.cancel()
        for c in list(self.clients.values()):
            if c.transport is not None and not c.closed:
                c.transport.close()
        self._stopped.set()

    def _shutdown(self) -> None:
        """Stop accepting, answer what was received, fsync, close."""
        self._stop_listening()
        for task in self._tasks:
            task.cancel()
        self.snapshots.stop()
        self.blocking.release_all()
        for c in list(self.clients.values()):
            c.release_holdings()        # SESSION and QWORK leases end with their connections
        self.committer.flush_and_sync_now()
        for c in list(self.clients.values()):
            c.flush()
            if c.transport is not None and not c.closed:
                c.transport.close()
        self.datadir.close()
        log.info("leaseq stopped; the log is fsynced")
        self._stopped.set()


async def serve(settings: config.Settings, open_datadir) -> None:
    """Listen at once, recover in a worker thread (``open_datadir()``, which
    returns a ``DataDir``) while answering -LOADING, then serve until stopped.
    A recovery error closes the port and is raised."""
    server = Server(settings)
    await server.listen()
    loop = asyncio.get_running_loop()
    try:
        datadir = await loop.run_in_executor(None, open_datadir)
    except BaseException:
        server.abort()
        raise
    # Jobs hold no reference cycles (refcounting frees them), yet each one is
    # tracked by the cyclic collector: at the default threshold a push spends
    # more time in collections than in the push. Collect the young generation
    # less often, move what recovery built into the permanent generation, and
    # from then on what survives a second (daemon/process.py).
    gc.set_threshold(50_000, 20, 20)
    gc.freeze()
    server.attach(datadir)
    server.spawn(keep_old_objects_out_of_collections())
    await server.wait_stopped()
    # let the transports write what they still hold
    await asyncio.sleep(0.05)
