"""Facts about this process that INFO and maxmemory read."""

from __future__ import annotations

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


def human_bytes(n: int) -> str:
    """Redis's ``used_memory_human`` form: 1023B, 1.50K, 12.34M, 1.00G."""
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n}B"
