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
