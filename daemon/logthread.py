"""The log's own thread: every fdatasync of the log, and, after a disk
fault, the cut-back and the resume, so that none of them ever overlaps an
fsync (docs/architecture.md, "A full or failing disk").

Work goes in through a ``queue.SimpleQueue``; each result comes back to the
event loop with one ``call_soon_threadsafe``.  No futures: with a
``ThreadPoolExecutor`` and ``run_in_executor`` an fsync's hand-off cost a
submit, a concurrent future, an asyncio future chained to it and their
callbacks, the largest cost left per fsync once the fsyncs themselves were
grouped (about 2,000 a second under 5,000 single-job pushes a second).
Under such a light load the committer now fsyncs on the loop's thread
instead (daemon/committer.py); this thread takes the heavier turns' fsyncs.

``fsync(fd, done)`` is the committer's usual way in: an fdatasync of the
segment being written, and nothing else.  Here it is a ``call`` like any
other.  The compiled twin (``daemon/_logthread.pyx``) runs it without the
interpreter: the thread never waits for the loop to let go of the
interpreter's lock, before the fdatasync or after it (docs/performance.md,
"An fsync thread that does not need the interpreter").
"""

from __future__ import annotations

import os
import queue
import threading

from leaseq.storage.flavour import compiled_twin

from .logwork import awaited, run_work


class LogThread:
    def __init__(self, loop) -> None:
        self.loop = loop
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        self._fsyncing = False
        self._thread = threading.Thread(target=self._run, name="leaseq-fsync", daemon=True)
        self._thread.start()

    def call(self, done, fn, *args) -> None:
        """Run ``fn(*args)`` in the thread, then ``done(result, error)`` on the
        loop (``error`` is the exception ``fn`` raised, or None)."""
        self._work.put((done, fn, args))

    def fsync(self, fd: int, done) -> None:
        """fdatasync ``fd`` in the thread, then ``done(None, error)`` on the
        loop (``error``: the OSError, or None).  One at a time (the compiled
        twin refuses a second before the first's ``done``, and so does this)."""
        if self._fsyncing:
            raise RuntimeError("an fsync is already under way")
        self._fsyncing = True

        def synced(result, error) -> None:
            self._fsyncing = False
            done(result, error)

        self.call(synced, os.fdatasync, fd)

    async def run(self, fn, *args):
        """``fn(*args)`` in the thread, awaited: its result, or its exception raised."""
        return await awaited(self, fn, *args)

    def stop(self) -> None:
        """Let the work already given finish, then end the thread."""
        self._work.put(None)
        self._thread.join()

    def _run(self) -> None:
        work, call_back = self._work, self.loop.call_soon_threadsafe
        while True:
            item = work.get()
            if item is None or not run_work(item, call_back):
                return


PureLogThread = LogThread
_twin = compiled_twin("leaseq.daemon._logthread")
COMPILED = _twin is not None
if COMPILED:
    LogThread = _twin.LogThread      # noqa: F811
