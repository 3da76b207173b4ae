"""Facts about this process that INFO and maxmemory read; the maxmemory
guard; ``every``, the loop of the daemon's periodic timers."""

from __future__ import annotations

import asyncio
import gc
import os
import resource


def rss_bytes() -> int:
    """Resident memory now."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return peak_rss_bytes()


def peak_rss_bytes() -> int:
    """The most resident memory this process has had."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def os_line() -> str:
    """As Redis's INFO ``os``: system, release, machine."""
    u = os.uname()
    return f"{u.sysname} {u.release} {u.machine}"


def tune_collector() -> None:
    """Once recovery is done.  Jobs hold no reference cycles (refcounting
    frees them), yet in the pure flavour each one is tracked by the cyclic
    collector (the compiled Job is not: storage/_job.pyx): at the default
    threshold a push spends more time in collections than in the push.  So
    the young generation is collected less often and what recovery built goes
    to the permanent generation; ``keep_old_objects_out_of_collections`` then
    does the same, from then on, for what survives a second."""
    gc.set_threshold(50_000, 20, 20)
    gc.freeze()


async def keep_old_objects_out_of_collections(every: float = 0.2, sweep_every: float = 600.0) -> None:
    """Jobs hold no reference cycles (refcounting frees them), yet the cyclic
    collector tracks each one, and its full collections rescan every live job
    (0.19 s per million): under a stream of pushes they cost more than a tenth
    of the daemon's CPU.  So every ``every`` seconds whatever has survived is
    moved to the permanent generation (``gc.freeze``, a constant-time list
    move), and collections only look at objects younger than that.  Cyclic
    garbage that outlived a freeze would stay, so every ``sweep_every``
    seconds everything goes back (``gc.unfreeze``) for one full collection."""
    since_sweep = 0.0
    while True:
        await asyncio.sleep(every)
        since_sweep += every
        if since_sweep >= sweep_every:
            since_sweep = 0.0
            gc.unfreeze()
            gc.collect()
        gc.freeze()


async def every(seconds: float, fn) -> None:
    """Call ``fn()`` every ``seconds`` until cancelled (``Server.spawn``'s
    tasks are, at shutdown)."""
    while True:
        await asyncio.sleep(seconds)
        fn()


class MemoryGuard:
    """maxmemory: every 0.1 s (``check``) compares the resident memory with
    the setting, read each time; ``Server.oom`` is what it found (commands
    flagged ``denyoom`` get -OOM meanwhile).  Its only writer."""

    PERIOD = 0.1

    def __init__(self, server) -> None:
        self.server = server

    def check(self) -> None:
        server = self.server
        limit = server.settings.maxmemory
        if limit:
            server.oom = rss_bytes() > limit
        elif server.oom:
            server.oom = False


def human_bytes(n: int) -> str:
    """Redis's ``used_memory_human`` form: 1023B, 1.50K, 12.34M, 1.00G."""
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n}B"
