"""Snapshots in the running daemon: when to take one, and taking it without
pausing the event loop.

When.  ``check`` runs at the end of every event-loop turn that wrote to the
log (``daemon.committer``; it compares two integers first): a snapshot starts when the
log written since the last one exceeds ``max(snapshot-min-bytes, 2 x live
data)`` (live data = the payloads of the jobs of fsync and async queues, plus
64 bytes per job for the rest of its record), and on ``BGSAVE``.

How.  Between two event-loop turns the parent writes out the log buffer and
starts a new segment (``DataDir.begin_snapshot``): at that instant the store
holds exactly what the sealed segments hold.  It then forks.  The child owns
a copy-on-write image of that instant: it writes the snapshot file
(``storage.snapshot.write``: temp file, fsync, rename, directory fsync),
reports ``ok <bytes> <jobs>`` through a pipe and exits.  The parent goes on
serving; the pipe's end-of-file wakes it (``loop.add_reader``), it reaps the
child and, on success, compacts (``DataDir.compact``) in a thread of its own:
deleting a few hundred MB of segments takes the file system about 100 ms,
too long for the loop.  The snapshot counts as taken (``snapshots_taken``,
the log line) once the compaction is done.  Only the fork itself (copying
page tables: about 20 ms for a 430 MB daemon here) happens on the loop.

Why a fork.  A thread would share the GIL with the loop for the seconds a
million jobs take to encode, and would need a frozen copy of the state made
on the loop first; the fork gets that copy from the kernel, and the encoding
runs on the other core.  The price is memory: pages the child reads are
copied once touched (reference counts), up to the size of the job state.

The child lets go of everything the parent owns that outlives it: it closes
its copy of the directory lock (the lock stays the parent's) and stops, with
its temporary file removed, as soon as it sees the parent is gone.  A
shutdown kills a running child; the next start replays the log instead.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

from leaseq.storage import snapshot
from leaseq.storage.config import MEMORY

log = logging.getLogger(__name__)

RECORD_OVERHEAD = 64      # bytes a job's record costs beyond its payload, about


class Snapshots:
    def __init__(self, server, loop) -> None:
        self.server = server
        self.loop = loop
        self.child = 0                 # pid of the running child, 0 when none
        self.compacting = False        # its compaction runs in the compactor's thread
        self.scheduled = False         # BGSAVE SCHEDULE asked for one after the running one
        self.started = 0.0             # monotonic time the running one started
        self.taken = 0
        loaded = server.datadir.loaded
        self.last_time = loaded.ts // 1000 if loaded else 0   # unix seconds of the last good one
        self.last_status = "ok"
        self.last_duration_ms = -1
        self.last_bytes = loaded.bytes if loaded else 0
        self._pipe = -1
        self._said = b""
        self.covers = 0                # the last segment the running (or last) one covers
        self._outcomes: list = []      # futures of ``outcome``: True once the running one counts as taken
        self._compactor = ThreadPoolExecutor(1, thread_name_prefix="leaseq-compact")

    @property
    def in_progress(self) -> bool:
        """From the fork until the compaction after it ends: a snapshot counts
        as taken only then, so BGSAVE, the automatic check and INFO see one
        running through both, and two compactions never overlap."""
        return self.child != 0 or self.compacting

    def live_bytes(self) -> int:
        return sum(q.payload_bytes + q.results.bytes + RECORD_OVERHEAD * (len(q.jobs) + len(q.results))
                   for q in self.server.store.queues.values() if q.durability is not MEMORY)

    def due(self) -> bool:
        since = self.server.datadir.log_bytes_since_snapshot
        return since > self.server.settings.snapshot_min_bytes and since > 2 * self.live_bytes()

    def check(self) -> None:
        server = self.server
        if not self.in_progress and not server.stopping and server.disk_error is None and self.due():
            self.start("the log grew past its threshold")

    def bgsave(self, schedule: bool = False) -> str:
        """BGSAVE: "started", or "scheduled" (SCHEDULE while one runs), or
        "running" (one runs and no SCHEDULE), or "failed" (the log cannot be
        written: ``server.disk_error`` says why)."""
        if self.in_progress:
            if schedule:
                self.scheduled = True
                return "scheduled"
            return "running"
        return "started" if self.start("BGSAVE") else "failed"

    # -- the fork ---------------------------------------------------------------------------

    def start(self, reason: str, rescue: bool = False) -> bool:
        """Start one now.  Not while the log cannot be written, unless it is
        the ``rescue`` of daemon/dirwatch.py: the log's files were removed,
        and this snapshot puts what the store holds back on the disk."""
        server = self.server
        datadir = server.datadir
        if server.disk_error is not None and not rescue:
            return False
        try:
            covers = datadir.begin_snapshot()
        except OSError as e:                # writing the buffer or the new segment failed
            log.error("cannot start a snapshot: %s", e)
            server.disk.failed(e, fsync_failed=True)     # begin_snapshot fsyncs: treat it as the worse case
            return False
        server.committer.touch()           # the buffer just written may release replies
        server.replication.anchor.moved(covers + 1)     # a replica: its stream's start moves to the new segment
        now = server.now_ms()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:                        # the child: never returns
            os.close(r)
            self._child(w, covers, now)
        os.close(w)
        self.child = pid
        self.covers = covers
        self.started = time.monotonic()
        self._pipe = r
        self._said = b""
        os.set_blocking(r, False)
        self.loop.add_reader(r, self._readable)
        log.info("snapshot started (%s): covers segments up to %d, child pid %d", reason, covers, pid)
        return True

    def outcome(self):
        """A future of the running snapshot: True once it counts as taken,
        False if it failed."""
        done = self.loop.create_future()
        self._outcomes.append(done)
        return done

    def _tell(self, ok: bool) -> None:
        outcomes, self._outcomes = self._outcomes, []
        for done in outcomes:
            if not done.done():
                done.set_result(ok)

    def _child(self, w: int, covers: int, now: int) -> None:
        code = 1
        try:
            gc.disable()
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, signal.SIG_DFL)
            try:
                signal.set_wakeup_fd(-1)
            except ValueError:
                pass
            datadir = self.server.datadir
            if datadir.lock_fd >= 0:
                os.close(datadir.lock_fd)   # the lock stays with the parent's descriptor
            parent = os.getppid()
            info = snapshot.write(self.server.store, datadir.directory, covers, now,
                                  still_wanted=lambda: os.getppid() == parent)
            os.write(w, b"ok %d %d\n" % (info.bytes, info.jobs))
            code = 0
        except BaseException as e:          # noqa: BLE001 - the child reports everything, then exits
            try:
                os.write(w, f"error {e}\n".encode(errors="replace"))
            except OSError:
                pass
        finally:
            os._exit(code)

    def _readable(self) -> None:
        try:
            chunk = os.read(self._pipe, 4096)
        except BlockingIOError:
            return
        if chunk:
            self._said += chunk
            return
        self.loop.remove_reader(self._pipe)
        os.close(self._pipe)
        self._pipe = -1
        _pid, status = os.waitpid(self.child, 0)
        self.child = 0
        self._finished(os.waitstatus_to_exitcode(status), self._said.decode(errors="replace").strip())

    def _finished(self, code: int, said: str) -> None:
        self.last_duration_ms = int((time.monotonic() - self.started) * 1000)
        if code == 0 and said.startswith("ok "):
            _ok, size, jobs = said.split()
            datadir = self.server.datadir
            datadir.snapshot_written()
            self.server.replication.full_sync.snapshot_done(self.covers)   # replicas that waited for its cut
            self.compacting = True
            done = self.loop.run_in_executor(self._compactor, datadir.compact)
            done.add_done_callback(lambda f: self._compacted(f, jobs, size))
            return
        self.last_status = "err"
        log.error("snapshot failed (child exit %d): %s", code, said or "no report")
        self.server.replication.full_sync.snapshot_done(None)
        self._tell(False)
        self._next()

    def _compacted(self, done, jobs: str, size: str) -> None:
        """The compaction after a good snapshot ended (in its thread): the
        snapshot counts as taken now."""
        self.compacting = False
        if done.cancelled():
            return
        error = done.exception()
        gone = [] if error is not None else done.result()
        if error is not None:
            log.error("compaction after the snapshot failed: %s; the segments stay until the next one", error)
        self.taken += 1
        self.last_status = "ok"
        self.last_time = int(time.time())
        self.last_bytes = int(size)
        log.info("snapshot written: %s jobs, %s bytes in %d ms; %s %d segments", jobs, size,
                 self.last_duration_ms, "archived" if self.server.datadir.archive_dir else "removed", len(gone))
        self._tell(True)
        self._next()

    def _next(self) -> None:
        if self.scheduled and not self.server.stopping:
            self.scheduled = False
            self.start("BGSAVE SCHEDULE")
        self.server.replication.full_sync.wanted()      # replicas that came while this one ran

    def stop(self) -> None:
        """Shutdown: a running compaction is let finish; a running child is
        killed, its temporary file removed."""
        self._compactor.shutdown(wait=True)
        if not self.child:
            return
        try:
            os.kill(self.child, signal.SIGKILL)
            os.waitpid(self.child, 0)
        except ChildProcessError:
            pass
        self.loop.remove_reader(self._pipe)
        os.close(self._pipe)
        self.child = 0
        snapshot.remove_temporaries(self.server.datadir.directory)
        log.info("shutdown stopped a running snapshot; the next start replays the log instead")

    def info_fields(self) -> list[tuple[str, object]]:
        return [
            ("snapshot_in_progress", 1 if self.in_progress else 0),
            ("last_snapshot_time", self.last_time),
            ("last_snapshot_status", self.last_status),
            ("last_snapshot_duration_ms", self.last_duration_ms),
            ("last_snapshot_bytes", self.last_bytes),
            ("snapshots_taken", self.taken),
            ("log_bytes_since_snapshot", self.server.datadir.log_bytes_since_snapshot),
            ("snapshot_min_bytes", self.server.settings.snapshot_min_bytes),
            ("archive_dir", self.server.datadir.archive_dir),
        ]
