"""Protected mode (``protected-mode``, on by default), as Redis has it: while
the default user has no password, only clients on the loopback interface
are served; any other gets ``-DENIED`` and is closed.

The rule looks at the client's address, not at ``bind``, as Redis 7 does:
on a loopback bind (the default) every client is a loopback client, so it
only ever refuses when the daemon listens beyond loopback.  The decision is
one pure function so that it can be tested with addresses a test on
127.0.0.1 can never produce (docs/operations.md, "Security").
"""

from __future__ import annotations

import ipaddress

LOOPBACK_NAMES = ("localhost",)


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` (an IP address as the socket reports its peer) is on
    the loopback interface: 127.0.0.0/8, ::1, or either mapped into IPv6
    (::ffff:127.0.0.1).  None (no address: a socket that is not IP) counts
    as local, as Redis counts a unix socket."""
    if host is None:
        return True
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def binds_beyond_loopback(bind: str) -> bool:
    """Whether a listener on ``bind`` can be reached from other hosts."""
    return bind.lower() not in LOOPBACK_NAMES and not (bind and is_loopback(bind))


def protected_mode_refuses(protected_mode: bool, default_user_has_no_password: bool, peer_host: str | None) -> bool:
    """Whether a new connection from ``peer_host`` gets -DENIED."""
    return protected_mode and default_user_has_no_password and not is_loopback(peer_host)
