# cython: language_level=3
"""The compiled twin of ``daemon.logthread.LogThread``: the same thread
and the same two ways in (``call`` for any work, ``fsync`` for an
fdatasync of one file), but an ``fsync`` runs without the interpreter.

The pure thread needs the interpreter's lock twice an fsync: to take the
work from its queue, and, once the fdatasync is back, to hand the result
to the loop.  While the loop runs commands it holds that lock, and the
thread waits until the loop next sleeps in its poll (or for Python's
switch interval, 5 ms): under W1, about 0.1 ms a side, on every fsync,
with the replies of the turn waiting behind it.  Here the loop posts an
fsync as a file descriptor in a field of this object and a count on an
eventfd (``wake``); the thread, outside the interpreter all along, reads
that count, runs the fdatasync, keeps its errno and counts on a second
eventfd (``done``), which the loop watches like any socket.  Neither side
waits for the other's lock; the loop learns of the end at its next poll,
as it learns of a request.

The fields the two threads share are written before the eventfd write
that announces them and read after the read that sees it: the eventfd's
system calls order them (they are full barriers on every architecture
Linux runs on).

One fsync at a time: the committer never posts one before the last one's
``done`` (its ``syncing``).  Work given to ``call`` goes through a Python
queue and runs with the interpreter, in the order given.  One thread runs
both, so an fsync posted while such work runs waits for it, and work
given during an fsync waits for the fsync: never at the same time (the
rule of ``daemon/logthread.py``: no cut-back or resume overlaps an
fsync).  Linux only (eventfd), as the compiled flavour is."""

import os
import queue
import threading

from leaseq.daemon.logwork import awaited, run_work

from libc.errno cimport errno
from libc.stdint cimport uint64_t
from posix.unistd cimport fdatasync, read, write


cdef class LogThread:
    cdef readonly object loop
    cdef object _work, _thread, _fsync_done
    cdef int _wake, _done
    cdef int _fd            # the file to fdatasync, or -1: none posted
    cdef int _error         # the errno of the last fdatasync, or 0
    cdef bint _stopping
    cdef long long _calls   # work items posted to ``call`` (loop), ...
    cdef long long _ran     # ... and taken by the thread

    def __init__(self, loop) -> None:
        self.loop = loop
        self._work = queue.SimpleQueue()
        self._fd = -1
        self._wake = os.eventfd(0)
        self._done = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        loop.add_reader(self._done, self._fsynced)
        self._thread = threading.Thread(target=self._run, name="leaseq-fsync", daemon=True)
        self._thread.start()

    def call(self, done, fn, *args) -> None:
        """Run ``fn(*args)`` in the thread, then ``done(result, error)`` on the
        loop (``error`` is the exception ``fn`` raised, or None)."""
        self._work.put((done, fn, args))
        self._calls += 1
        self._signal()

    def fsync(self, int fd, done) -> None:
        """fdatasync ``fd`` in the thread, then ``done(None, error)`` on the
        loop (``error``: the OSError, or None)."""
        if self._fsync_done is not None:     # (set with _fd, let go only once the thread is done with it)
            raise RuntimeError("an fsync is already under way")
        self._fsync_done = done
        self._fd = fd
        self._signal()

    async def run(self, fn, *args):
        """``fn(*args)`` in the thread, awaited: its result, or its exception raised."""
        return await awaited(self, fn, *args)

    def stop(self) -> None:
        """Let the work already given finish, then end the thread."""
        self._stopping = True
        self._signal()
        self._thread.join()
        try:
            self.loop.remove_reader(self._done)
        except RuntimeError:        # the loop is closed
            pass
        os.close(self._wake)
        os.close(self._done)

    cdef void _signal(self):
        cdef uint64_t one = 1
        write(self._wake, &one, 8)

    def _fsynced(self) -> None:
        """The loop: the thread's fdatasync ended."""
        cdef uint64_t count
        if read(self._done, &count, 8) != 8:
            return
        done, self._fsync_done = self._fsync_done, None
        error = self._error
        if done is not None:
            done(None, OSError(error, os.strerror(error)) if error else None)

    def _run(self) -> None:
        cdef uint64_t count, one = 1
        cdef int fd
        with nogil:
            while True:
                read(self._wake, &count, 8)
                fd = self._fd
                if fd >= 0:
                    self._error = errno if fdatasync(fd) != 0 else 0
                    self._fd = -1
                    write(self._done, &one, 8)
                if self._ran != self._calls:
                    with gil:
                        self._run_calls()
                if self._stopping and self._fd < 0 and self._ran == self._calls:
                    break

    def _run_calls(self) -> None:
        """The thread, with the interpreter: the work posted to ``call``."""
        call_back = self.loop.call_soon_threadsafe
        while self._ran != self._calls:
            item = self._work.get()
            self._ran += 1
            run_work(item, call_back)        # (False once the loop is closed: the rest still runs)
