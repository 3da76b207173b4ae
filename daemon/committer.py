"""Group commit: one write per event-loop turn, fsync in the log's thread
under load, on the loop when the load is light.

``touch()`` schedules ``end_of_turn`` once per turn (``call_soon`` runs after
the I/O callbacks of the current loop iteration).  ``end_of_turn`` first lets
blocked claimers take the jobs this turn made ready, then writes the log
buffer with one ``write`` (one generation) and releases the replies whose
tickets needed only that; if a record written needs fsync before its reply,
it starts an ``fdatasync`` in the log's thread (``daemon.logthread``; when
the segment being written is all there is to sync, ``LogThread.fsync``,
which the compiled thread runs without the interpreter).  Last it asks whether the
log has grown enough for a snapshot (``daemon.snapshots``).  (A connection
whose commands woke parked claimers and left nothing else for the end of the
turn serves them itself, right after its commands: ``serve_now``.)  While that runs the loop
keeps reading, parsing and running commands; a later turn's records are
written and covered by the next ``fdatasync``, which starts as soon as the
running one ends.  When one ends, connections release the replies whose
tickets it reached.  The log's generations (``storage.wal.LogBuffer``) are
the whole state: the committer only remembers whether an fsync is running.

A light turn (``INLINE_BYTES`` written or fewer) runs its fsync on the
loop's own thread instead, as Redis's ``appendfsync always`` does, unless
the disk has been slow (a moving average of the fsyncs' durations above
``INLINE_MAX_FSYNC``: a lone slow fsync does not move it far, a slow
spell does) or a snapshot is being written.  Under a light load the loop
has little to do while the disk works, and the hand-off costs more than
it saves: at 5,000 single-job pushes a second it was about a quarter of
the daemon's CPU a job, in small turns, wake-ups and context switches on
both threads (the log's thread's own system time was the fdatasync
itself, about the same on either thread).  Requests that arrive meanwhile wait in their sockets
and make the next turn larger, so the next fsync covers more of them.
Before it waits for the disk, the turn releases the replies the log had
already reached (those that needed only the write, and under
min-replicas-to-ack those a replica's acknowledgement released in this
turn): they do not wait for an fsync they do not need.  A
heavy turn keeps the thread, so that the loop reads and runs the next
turn's commands while the disk works (docs/performance.md, "The fsync on
the loop's thread under a light load").

A replica (``server.read_only``) fsyncs every turn on the loop's thread,
heavy or light, on the same two conditions.  Its loop has no writer to
serve meanwhile: what it would do while the log's thread works is apply
the primary's next records, and those wait in the socket and make the
next turn larger instead.  The hand-off is what its primary waits on: the
thread's return to the interpreter after the fdatasync, then the loop's
wake-up, all before the REPLCONF ACK that releases the primary's replies
under ``min-replicas-to-ack``.  With the replica's fsync on its loop's
thread the acknowledging primary took about a third more jobs a second in
W1 (docs/performance.md, "A replica fsyncs on its loop's thread").

A write or fsync error is never retried on the same file: ``failed`` answers
every held reply whose records did not get where its ticket needed with
-MISCONF, and hands the rest to ``daemon.faults`` (``DiskFaults.failed``), which
cuts the log back, rebuilds the store from disk and resumes writing in a new
segment once the disk takes it (docs/operations.md, "A full or failing
disk").
"""

from __future__ import annotations

import asyncio
import logging
import time

from leaseq.storage.wal import MemoryLog

from .logthread import LogThread

log = logging.getLogger(__name__)

INLINE_BYTES = 2048         # a turn that wrote at most this many bytes fsyncs on the loop's thread ...
INLINE_MAX_FSYNC = 0.002    # ... unless fsyncs have lately taken longer than this (seconds, on average) ...
FSYNC_AVERAGE = 8           # ... over about this many (the weight of the newest in the moving average is 1/8)


class Committer:
    __slots__ = ("server", "blocking", "loop", "wal", "thread", "scheduled", "syncing", "waiters", "fsyncs", "last_fsync_ms",
                 "closed", "fsyncs_inline", "fsync_average", "serving", "on_synced")

    def __init__(self, server, loop) -> None:
        self.server = server
        self.blocking = server.blocking   # (made before the committer: Server.listen)
        self.loop = loop
        self.wal = MemoryLog()        # a stand-in that takes nothing until ``resumed`` (``Server.attach``)
        self.thread = LogThread(loop)
        self.scheduled = False
        self.syncing = False
        self.waiters: set = set()
        self.fsyncs = 0
        self.last_fsync_ms = 0
        self.closed = False
        self.fsyncs_inline = 0        # of ``fsyncs``, those run on the loop's thread
        self.fsync_average = 0.0      # seconds an fsync takes, lately (a moving average)
        self.serving = False          # serve_now runs: the connections it answers leave what they woke to the turn's end
        self.on_synced = None         # called after each fsync while a WAITAOF waits for one (daemon/replicawaits.py)

    def touch(self) -> None:
        if not self.scheduled:
            self.scheduled = True
            self.loop.call_soon(self.end_of_turn)

    def work_left(self) -> bool:
        """Whether this turn left ``end_of_turn`` something to do besides the
        held replies of a connection: records to write, or queues to serve
        to someone waiting.  A turn of reads alone, or of pushes to memory
        queues nobody waits on, schedules nothing (a callback and its checks
        were a fifth of a read's cost on the loop).  Queues woken meanwhile
        stay in the store's woken set until a turn serves them."""
        return bool(self.wal.buffer) or self._woken_waited()

    def _woken_waited(self) -> bool:
        """Whether a queue was woken that someone waits on."""
        blocking = self.blocking
        if blocking.woken:
            return True
        if not (blocking.by_queue or blocking.workers):
            return False
        return bool(blocking.store.woken)

    def serve_now(self) -> None:
        """Right after a connection's commands, when they left the log
        nothing to write and held no reply: serve the claimers parked on the
        queues those commands woke, instead of at the end of the turn.  The
        end of the turn would have had nothing else to do, and at one job
        per request it was a callback of the loop a job (about 7 % of a
        job's first-level cache misses).  Not while serving: the connections
        served run their own pipelined commands, and leave what those woke
        to the end of the turn, so a turn never recurses from connection to
        connection."""
        if self.serving or self.closed or self.wal.buffer:
            return
        if self._woken_waited():
            self.serving = True
            try:
                self.blocking.serve_woken()
            finally:
                self.serving = False

    def wait(self, conn) -> None:
        self.waiters.add(conn)

    def end_of_turn(self) -> None:
        self.scheduled = False
        if self.closed:
            return
        self.blocking.serve_woken()
        self.commit_turn()

    def commit_turn(self) -> None:
        """The rest of ``end_of_turn``: write the turn's records, fsync
        them if they need it, release the held replies the log reached,
        and see whether a snapshot is due."""
        wal = self.wal
        wrote = bool(wal.buffer)
        before = wal.bytes_written
        if wrote:
            try:
                wal.flush()
            except OSError as e:
                log.error("cannot write the log: %s", e)
                self.server.disk.failed(e, fsync_failed=False)
                return
        self._release()                    # before an inline fsync: what the log had reached does not wait for the disk
        if wal.sync_wanted:
            self.start_sync(inline=wal.bytes_written - before <= INLINE_BYTES or self.server.read_only)
        snapshots = self.server.snapshots  # None while recovery runs
        if wrote and snapshots is not None:
            snapshots.check()              # the log grew: it may be past its threshold now

    def start_sync(self, inline: bool = False) -> None:
        """Start an fdatasync of everything written (unless one runs: when it
        ends, the next starts if anything written still needs one).
        ``inline``: the turn was light, or this node is a replica; run it
        on this thread, and its replies go before this returns, if the
        disk has been quick (see the module's docstring)."""
        if self.syncing:
            return
        self.syncing = True
        wal = self.wal
        target = wal.start_sync()
        started = time.monotonic()
        snapshots = self.server.snapshots
        if inline and self.fsync_average <= INLINE_MAX_FSYNC and (snapshots is None or not snapshots.in_progress):
            self.fsyncs_inline += 1
            try:
                wal.sync()
            except Exception as e:          # as the log's thread hands any error over: a disk fault
                self._synced(e, wal, target, started)
            else:
                self._synced(None, wal, target, started)
            return
        done = lambda _result, error: self._synced(error, wal, target, started)    # noqa: E731
        fd = wal.sync_fd()
        if fd >= 0:                         # (the usual case: the segment being written, nothing else)
            self.thread.fsync(fd, done)
        else:
            self.thread.call(done, wal.sync)

    def _synced(self, error, wal, target: int, started: float) -> None:
        self.syncing = False
        if wal is not self.wal:             # the log failed meanwhile and was let go
            return
        if error is not None:
            log.error("fsync of the log failed: %s", error)
            self.server.disk.failed(error, fsync_failed=True)
            return
        self.fsyncs += 1
        self.last_fsync_ms = int(time.time() * 1000)
        seconds = time.monotonic() - started
        self.fsync_average += (seconds - self.fsync_average) / FSYNC_AVERAGE
        self.server.metrics.fsync.observe(seconds)
        self.wal.synced(target, int(seconds * 1000))
        self._release()
        self.server.replication.synced()
        if self.on_synced is not None:
            self.on_synced()
        if self.wal.sync_wanted and not self.closed:
            self.start_sync()

    def _release(self) -> None:
        """Connections write the replies whose tickets the log has reached."""
        if self.waiters:
            wal = self.wal
            done = [c for c in self.waiters if c.closed or c.release(wal)]
            for c in done:
                self.waiters.discard(c)

    async def sync_every_interval(self) -> None:
        """Async queues: fsync what was written, at least every fsync-interval
        (read each time, so CONFIG SET applies at once); ``Server.listen``
        starts it."""
        while True:
            await asyncio.sleep(max(self.server.settings.fsync_interval, 1) / 1000.0)
            if self.wal.unsynced and not self.syncing and not self.closed:
                self.start_sync()

    def sync_soon(self) -> None:
        """WAITAOF: an fsync of everything appended so far, at the end of
        this turn rather than at the next fsync-interval (nothing when it
        is durable already, or an fsync under way covers it)."""
        if self.wal.want_sync():
            self.touch()

    def flush_and_sync_now(self) -> None:
        """Shutdown: write and fsync everything, release every held reply."""
        self.closed = True
        self.blocking.serve_woken()
        self.wal.flush_and_sync()
        self._release()
        self.thread.stop()

    def info_fields(self) -> list[tuple[str, object]]:
        return [("last_fsync_time_ms", self.last_fsync_ms), ("fsyncs", self.fsyncs),
                ("fsyncs_inline", self.fsyncs_inline)]

    def failed(self, error, unseen) -> None:
        """The log failed: release what it reached, answer every other held
        reply with ``error`` (a read's with ``unseen``), and stop using it (a
        stand-in takes nothing until ``resumed``)."""
        self._release()
        for conn in self.waiters:
            if not conn.closed:
                conn.fail_held(error, unseen)
        self.waiters.clear()
        self.wal = MemoryLog()

    def resumed(self, wal) -> None:
        self.wal = wal
