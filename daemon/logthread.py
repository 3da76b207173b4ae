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
"""

from __future__ import annotations

import queue
import threading


class LogThread:
    def __init__(self, loop) -> None:
        self.loop = loop
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="leaseq-fsync", daemon=True)
        self._thread.start()

    def call(self, done, fn, *args) -> None:
        """Run ``fn(*args)`` in the thread, then ``done(result, error)`` on the
        loop (``error`` is the exception ``fn`` raised, or None)."""
        self._work.put((done, fn, args))

    async def run(self, fn, *args):
        """``fn(*args)`` in the thread, awaited: its result, or its exception raised."""
        future = self.loop.create_future()

        def done(result, error) -> None:
            if future.cancelled():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

        self.call(done, fn, *args)
        return await future

    def stop(self) -> None:
        """Let the work already given finish, then end the thread."""
        self._work.put(None)
        self._thread.join()

    def _run(self) -> None:
        work, call_back = self._work, self.loop.call_soon_threadsafe
        while True:
            item = work.get()
            if item is None:
                return
            done, fn, args = item
            try:
                result, error = fn(*args), None
            except BaseException as e:      # handed to the loop, which decides (disk fault, log it)
                result, error = None, e
            try:
                call_back(done, result, error)
            except RuntimeError:             # the loop is closed: the daemon is stopping
                return
