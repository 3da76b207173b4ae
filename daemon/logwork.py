"""What both flavours of the log's thread (``daemon/logthread.py`` and its
compiled twin ``daemon/_logthread.pyx``) do the same way: run a piece of
work given to ``call`` and hand its result to the loop, and ``run``'s
awaiting of it.  A module of its own, so that the twin need not import the
module that loads it."""

from __future__ import annotations


def run_work(item, call_back) -> bool:
    """In the thread: run one piece of work given to ``call``, ``(done, fn,
    args)``, and hand ``done`` its result or its exception through
    ``call_back`` (the loop's ``call_soon_threadsafe``); False once the loop
    is closed (the daemon is stopping).  Both flavours' threads run their
    work through this."""
    done, fn, args = item
    try:
        result, error = fn(*args), None
    except BaseException as e:      # handed to the loop, which decides (disk fault, log it)
        result, error = None, e
    try:
        call_back(done, result, error)
    except RuntimeError:             # the loop is closed
        return False
    return True


async def awaited(thread, fn, *args):
    """``thread.run``, for both flavours: ``fn(*args)`` in the thread,
    awaited; its result, or its exception raised."""
    future = thread.loop.create_future()

    def done(result, error) -> None:
        if future.cancelled():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    thread.call(done, fn, *args)
    return await future
