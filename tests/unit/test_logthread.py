"""The log's thread in both flavours (``daemon.logthread.LogThread``, and
its compiled twin daemon/_logthread.pyx, whose fsync runs without the
interpreter): results and errors come back on the loop, in the order the
work was given; an fsync never runs at the same time as other work; one
fsync at a time; ``stop`` lets the work given finish."""

from __future__ import annotations

import asyncio
import errno
import os
import time

import pytest

from leaseq.daemon import logthread

FLAVOURS = [logthread.PureLogThread] + ([logthread.LogThread] if logthread.COMPILED else [])


def test_the_compiled_thread_is_used_when_built():
    assert logthread.COMPILED is (logthread.LogThread is not logthread.PureLogThread)


def _on_loop(flavour, body):
    """Run ``body(thread, loop)`` (a coroutine) on a fresh loop with a fresh thread; stop both."""
    async def main():
        thread = flavour(asyncio.get_running_loop())
        try:
            return await body(thread, asyncio.get_running_loop())
        finally:
            thread.stop()
    return asyncio.run(main())


def _fsync(thread, loop, fd):
    future = loop.create_future()
    thread.fsync(fd, lambda result, error: future.set_result((result, error)))
    return future


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_an_fsync_of_a_file_comes_back_on_the_loop(flavour, tmp_path):
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"x" * 4096)

        async def body(thread, loop):
            results = []
            for _ in range(3):                      # one after another, as the committer posts them
                results.append(await _fsync(thread, loop, fd))
            return results
        assert _on_loop(flavour, body) == [(None, None)] * 3
    finally:
        os.close(fd)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_an_fsync_that_fails_says_why(flavour):
    """The committer hands the error to the disk-fault path: it must be the
    OSError fdatasync raised, with its errno."""
    read_end, write_end = os.pipe()
    closed = 4000                           # (a descriptor nothing here opens: the loop's own come and go)
    with pytest.raises(OSError):
        os.fstat(closed)

    async def body(thread, loop):
        return [await _fsync(thread, loop, read_end), await _fsync(thread, loop, closed)]
    try:
        (r1, e1), (r2, e2) = _on_loop(flavour, body)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert r1 is None and isinstance(e1, OSError) and e1.errno == errno.EINVAL     # (a pipe cannot be synced)
    assert r2 is None and isinstance(e2, OSError) and e2.errno == errno.EBADF
    assert e2.strerror == os.strerror(errno.EBADF)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_second_fsync_before_the_first_ends_is_refused(flavour, tmp_path):
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o644)

    async def body(thread, loop):
        first = _fsync(thread, loop, fd)
        with pytest.raises(RuntimeError, match="already under way"):
            thread.fsync(fd, lambda result, error: None)
        got = await first
        again = await _fsync(thread, loop, fd)      # once it ended, the next is taken
        return got, again
    try:
        assert _on_loop(flavour, body) == ((None, None), (None, None))
    finally:
        os.close(fd)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_work_results_and_errors_come_back_in_order(flavour):
    async def body(thread, loop):
        seen = []
        done = loop.create_future()

        def back(tag):
            def deliver(result, error):
                seen.append((tag, result, type(error).__name__ if error else None))
                if len(seen) == 3:
                    done.set_result(None)
            return deliver
        thread.call(back("a"), lambda: 1)
        thread.call(back("b"), lambda: 1 / 0)
        thread.call(back("c"), pow, 2, 10)
        await done
        assert await thread.run(sum, [1, 2, 3]) == 6
        with pytest.raises(KeyError):
            await thread.run({}.__getitem__, "missing")
        return seen
    assert _on_loop(flavour, body) == [("a", 1, None), ("b", None, "ZeroDivisionError"), ("c", 1024, None)]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_an_fsync_given_during_other_work_waits_for_it(flavour, tmp_path):
    """No cut-back or resume overlaps an fsync: one thread runs both."""
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o644)
    spans = {}

    def slow():
        spans["work"] = (time.monotonic(), None)
        time.sleep(0.3)
        spans["work"] = (spans["work"][0], time.monotonic())

    async def body(thread, loop):
        work = loop.create_future()
        thread.call(lambda result, error: work.set_result(error), slow)
        while "work" not in spans:                  # the work has started
            await asyncio.sleep(0.005)
        synced = await _fsync(thread, loop, fd)
        return await work, synced, time.monotonic()
    try:
        error, synced, after = _on_loop(flavour, body)
    finally:
        os.close(fd)
    assert error is None and synced == (None, None)
    assert spans["work"][1] is not None and after >= spans["work"][1]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_stop_lets_the_work_given_finish(flavour):
    ran = []

    async def body(thread, loop):
        thread.call(lambda result, error: None, lambda: time.sleep(0.1) or ran.append(1))
        thread.call(lambda result, error: None, ran.append, 2)
    _on_loop(flavour, body)
    assert ran == [1, 2]
