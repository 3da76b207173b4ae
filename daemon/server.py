"""The server: the daemon's parts put together; the clients, the clock,
the settings, start-up and orderly shutdown.

Commands reach the daemon's state only through this object (``client.server``
in the handlers), as ``commands.context.ServerContext`` describes: the store,
the settings, ``now_ms()``, the client registry and a few services (CONFIG,
INFO, shutdown, blocked claimers).
"""

from __future__ import annotations

import asyncio
import logging
import signal

from leaseq.commands.acl import Acl
from leaseq.commands.parties import Host, Stats
from leaseq.commands.table import TABLE
from leaseq.storage.datadir import DataDir
from leaseq.storage.journal import Journal
from leaseq.storage.store import Store
from leaseq.storage.wal import Faults

from . import config
from .admission import Admission, IdleReaper
from .alarm import Alarm
from .blocking import Blocking
from .channels import Channels
from .clock import Clock
from .committer import Committer
from .configuration import Configuration
from .connection import Connection
from .dirwatch import DirectoryWatch
from .faults import DiskFaults
from .info import SAMPLE_EVERY, Info
from .listeners import Listeners
from .metrics import Metrics
from .pause import Pause
from .process import MemoryGuard, every, keep_old_objects_out_of_collections, tune_collector
from .replication import Replication
from .roles import Roles
from .shutdown import Shutdown
from .slowlog import SlowLog
from .snapshots import Snapshots

log = logging.getLogger(__name__)


class Server(Host):
    """Listens at once and answers -LOADING until ``attach`` hands it the
    recovered data directory (docs/operations.md, "Starting").  Its parts
    each do one job: ``listeners`` (daemon/listeners.py), ``admission`` and
    the idle-client ``reaper`` (daemon/admission.py), ``info``
    (daemon/info.py), the maxmemory ``memory`` guard (daemon/process.py),
    ``committer``, ``blocking``, ``snapshots``, ``disk`` (faults.py) and
    ``dirwatch`` (a data directory removed under it)."""

    __slots__ = ("settings", "acl", "datadir", "faults", "clients", "stopping", "listeners", "admission",
                 "reaper", "memory", "info", "disk", "_stopped", "_tasks", "loop", "blocking", "alarm", "committer",
                 "snapshots", "configuration", "channels", "roles", "dirwatch", "shutdown",
                 "_pause_timer")     # and Host's

    def __init__(self, settings: config.Settings, config_file: str | None = None) -> None:
        self.settings = settings
        self.configuration = Configuration(self, config_file)   # CONFIG GET, SET, REWRITE (daemon/configuration.py)
        self.acl = Acl(TABLE, settings.users, settings.requirepass)   # users and permissions
        self.datadir: DataDir | None = None
        self.loading = True
        self.store = Store()          # an empty stand-in until recovery is done; while loading
        self.faults = Faults()        # no command that writes (nor DEBUG) runs, so nothing reaches them
        self.clients: dict[int, Connection] = {}
        self.stats = Stats()
        self.oom = False                         # written by ``memory`` only
        self.stopping = False
        self.clock = Clock(0, False, 0, on_change=self._clock_changed)
        self.listeners = Listeners(self)
        self.admission = Admission(self)
        self.reaper = IdleReaper(self)
        self.memory = MemoryGuard(self)
        self.info = Info(self)
        self.disk_error: OSError | None = None   # why the log cannot be written: write commands get -MISCONF
        self.disk = DiskFaults(self)             # ... set and cleared by this (daemon/faults.py)
        self.dirwatch = DirectoryWatch(self)     # ... and by this, when the data directory is removed
        self.metrics = Metrics(self)             # what /metrics shows (daemon/metrics.py)
        self.paused = False                      # CLIENT PAUSE, or a shutdown waiting for replicas: ...
        self.pause = Pause(self, self._arm_pause)   # ... which commands wait (daemon/pause.py)
        self._pause_timer = None
        self.shutdown = Shutdown(self)           # a shutdown that lets the replicas catch up (daemon/shutdown.py)
        self._stopped: asyncio.Event | None = None
        self._tasks: list = []
        self.loop = None
        self.blocking: Blocking | None = None
        self.alarm: Alarm | None = None
        self.committer: Committer | None = None
        self.snapshots: Snapshots | None = None
        self.replication = Replication(self)     # as a primary and as a replica (daemon/replication.py)
        self.read_only = False                   # a replica: commands that write get -READONLY
        self.channels = Channels()               # plain pub/sub channels (daemon/channels.py)
        self.replicas_gate = 0                   # min-replicas-to-write while it applies (0: off)
        self.slowlog = SlowLog(self, settings)   # SLOWLOG; sets ``slow_after`` (daemon/slowlog.py)
        self.roles = Roles(self)                 # what becoming a replica or a primary changes (daemon/roles.py)

    def attach(self, datadir: DataDir) -> None:
        """Recovery is done: serve the recovered store from now on.  DEBUG
        FAULT's ``faults`` is the data directory's, which gives it to every
        log it opens (``DataDir.resume``)."""
        s = self.settings
        self.datadir = datadir
        store = datadir.store
        self.serve_store(store)
        self.faults = datadir.faults
        config.copy_to_storage(s, store, datadir)
        self.clock = Clock(*store.clock, on_change=self._clock_changed)
        if self.clock.frozen and not s.enable_debug_command:
            # a test froze time in this data directory; without DEBUG nobody could resume it
            log.warning("the log holds a frozen DEBUG clock and enable-debug-command is no: resuming it")
            self.clock.resume()
        self.write_to(datadir.wal)
        self.snapshots = Snapshots(self, self.loop)
        self.loading = False
        self.history_tick()                  # the history's first minute opens now
        self.alarm.attach(store)
        if s.replicaof:
            self.replication.anchor.restore(datadir)
            self.replication.follow(*config.primary_address(s.replicaof))
        log.info("leaseq ready to serve on %s (data directory %s)", self.listeners.addresses(), s.dir)
        if self.stopping:                    # a shutdown asked for while loading
            self.loop.call_soon(self._shutdown)

    def replace_after_disk_fault(self, store: Store | None = None, wal=None) -> None:
        """A disk fault's recovery (daemon/faults.py) hands over the store
        rebuilt from disk, and later the new log once writing resumes."""
        if store is not None:
            self.serve_store(store)
            self.alarm.attach(store)
            self.datadir.history.rebase(store)   # its counters are what its replay counted
        if wal is not None:
            self.write_to(wal)
        config.copy_to_storage(self.settings, self.store, self.datadir)

    def write_to(self, wal) -> None:
        """``wal`` is the log from now on; what it writes is the replication stream."""
        self.replication.attach_log(wal)
        self.committer.resumed(wal)
        self.replication_rules()

    def replication_rules(self) -> None:
        """What the min-replicas-* settings ask, for this node's role now:
        a primary's writes wait for replicas' disks (``LogBuffer.ack_needed``)
        or are refused without enough good replicas (``replicas_gate``)."""
        s = self.settings
        primary = not self.read_only
        self.replicas_gate = s.min_replicas_to_write if primary and s.min_replicas_max_lag else 0
        wal = self.datadir.wal if self.datadir is not None else None
        if wal is not None:
            wal.require_acks(primary and s.min_replicas_to_ack > 0)

    def serve_store(self, store: Store) -> None:
        """From now on ``store`` is the one served: the claimers' waits hold
        it too (``Blocking.store``), since they look at it at every turn.  A
        replica's store logs nothing and does not fold (``Roles.become_replica``, daemon/roles.py)."""
        self.store = store
        self.blocking.store = store
        if self.read_only:
            store.journal = Journal()
            store.following = True

    def spawn(self, coroutine) -> None:
        """Run a background task that stops with the server."""
        self._tasks = [t for t in self._tasks if not t.done()]
        self._tasks.append(self.loop.create_task(coroutine))

    @property
    def history(self):
        """Every queue's minutes (storage/history.py), kept by the data
        directory; None while loading."""
        return self.datadir.history if self.datadir is not None else None

    def history_tick(self) -> None:
        """Close the history's minute once the clock is past it (every
        second, and when DEBUG moves the clock).  A replica counts nothing:
        its history is what it had when it became one."""
        if self.datadir is not None and not self.loading and not self.read_only:
            self.datadir.history.tick(self.store, self.now_ms())

    def _clock_changed(self, offset: int, frozen: bool, frozen_at: int) -> None:
        """DEBUG moved the clock: log it, close the history's minute if it
        ended, then fold and re-arm every queue someone waits on."""
        self.store.set_clock(offset, frozen, frozen_at)
        self.history_tick()
        if self.blocking is not None:
            self.blocking.time_moved()
        if self.alarm is not None and not self.loading:
            self.alarm.time_moved()

    # -- what handlers call (commands.context.ServerContext) ----------------------------------

    @property
    def auth_required(self) -> bool:
        return self.acl.auth_required

    def info_sections(self) -> dict[str, list[tuple[str, object]]]:
        return self.info.sections()

    def reset_stats(self) -> None:
        self.stats = Stats()
        self.info.clear_samples()

    def unregister(self, conn: Connection) -> None:
        self.clients.pop(conn.id, None)
        self.replication.replicas.forget(conn)
        self.shutdown.check()                    # (a shutdown waits no longer for a replica gone)
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

    # -- running --------------------------------------------------------------------------------

    async def listen(self) -> None:
        """Open the ports and start the timers; until ``attach`` every
        command but the few flagged ``loading`` is answered -LOADING."""
        loop = asyncio.get_running_loop()
        self.loop = loop
        self._stopped = asyncio.Event()
        self.blocking = Blocking(self, loop)
        self.alarm = Alarm(self, loop)
        self.committer = Committer(self, loop)
        await self.listeners.start(loop)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.shutdown.signalled, signal.Signals(sig).name)
        self.spawn(self.committer.sync_every_interval())
        self.spawn(every(SAMPLE_EVERY, self.info.sample))
        self.spawn(every(MemoryGuard.PERIOD, self.memory.check))
        self.spawn(every(IdleReaper.PERIOD, self.reaper.scan))
        self.spawn(every(DirectoryWatch.PERIOD, self.dirwatch.scan))
        self.spawn(every(1.0, self.history_tick))
        self.admission.warn_if_reachable_without_password(self.listeners.binds())
        log.info("leaseq listening on %s; recovering data directory %s", self.listeners.addresses(),
                 self.settings.dir)

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    def request_shutdown(self, reason: str, force: bool = False, now: bool = False, conn=None) -> bool:
        """Stop (``_shutdown``, on the next turn), once the replicas have
        everything unless ``now`` (daemon/shutdown.py; ``conn``, the
        SHUTDOWN's client, waits meanwhile).  Not while the log's files
        are gone and the queues are not back on the disk (daemon/dirwatch.py):
        stopping would lose them, so it says why and returns False, unless
        ``force`` (SHUTDOWN FORCE)."""
        if self.stopping:
            return True
        if self.dirwatch.restoring and not force:
            log.error("not shutting down (%s): the log's files were removed and the queues are not back on the "
                      "disk yet; stopping now would lose them (SHUTDOWN FORCE does)", reason)
            return False
        shutdown = self.shutdown
        if shutdown.waiting:
            if now:
                shutdown.now()
            else:
                shutdown.join(conn)
            return True
        if self.loading:
            self.stopping = True
            log.info("shutting down (%s) once recovery is done", reason)
            return True
        if not now and shutdown.begin(reason, conn):
            return True
        self.stop(reason)
        return True

    def stop(self, reason: str) -> None:
        """Stop on the next turn, whatever waits."""
        self.stopping = True
        log.info("shutting down (%s)", reason)
        self.loop.call_soon(self._shutdown)

    def _arm_pause(self, seconds: float | None) -> None:
        """The pause's timer (daemon/pause.py): ``expire`` after ``seconds``."""
        if self._pause_timer is not None:
            self._pause_timer.cancel()
            self._pause_timer = None
        if seconds is not None:
            self._pause_timer = self.loop.call_later(seconds, self.pause.expire)

    def abort(self) -> None:
        """Recovery failed: close the ports and every connection."""
        self.listeners.close()
        for task in self._tasks:
            task.cancel()
        for c in list(self.clients.values()):
            if c.transport is not None and not c.closed:
                c.transport.close()
        self._stopped.set()

    def _shutdown(self) -> None:
        """Stop accepting, answer what was received, fsync, close."""
        self.listeners.close()
        for task in self._tasks:
            task.cancel()
        self.snapshots.stop()
        self.blocking.release_all()
        for c in list(self.clients.values()):
            c.holdings.release_all()        # SESSION and QWORK leases end with their connections
        self.committer.flush_and_sync_now()
        if not self.read_only:
            self.datadir.history.close_minute(self.store)    # the open minute too (merged if the next run goes on)
        for c in list(self.clients.values()):
            c.flush()
            if c.transport is not None and not c.closed:
                c.transport.close()
        self.datadir.close()
        log.info("leaseq stopped; the log is fsynced")
        self._stopped.set()


async def serve(settings: config.Settings, open_datadir, config_file: str | None = None) -> None:
    """Listen at once, recover in a worker thread (``open_datadir()``, which
    returns a ``DataDir``) while answering -LOADING, then serve until stopped.
    A recovery error closes the port and is raised."""
    server = Server(settings, config_file)
    await server.listen()
    loop = asyncio.get_running_loop()
    try:
        datadir = await loop.run_in_executor(None, open_datadir)
    except BaseException:
        server.abort()
        raise
    tune_collector()
    server.attach(datadir)
    server.spawn(keep_old_objects_out_of_collections())
    await server.wait_stopped()
    # let the transports write what they still hold
    await asyncio.sleep(0.05)
