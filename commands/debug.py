"""DEBUG: test helpers, refused unless the server runs with
``enable-debug-command yes`` (as Redis does).

``DEBUG CLOCK``                    map: now, offset, frozen
``DEBUG CLOCK ADVANCE ms``         move the daemon's clock forward
``DEBUG CLOCK FREEZE [ms-epoch]``  stop it (at now, or at a later moment)
``DEBUG CLOCK RESUME``             let it run again from where it stands

The clock only ever moves forward.  Its state is logged, so a restart keeps
the test's time.  Leases, delays, backoff, EXPIRE and retention all read this
clock, so tests move time instead of sleeping.
"""

from __future__ import annotations

from . import errors
from .args import in_range
from .queues import MS_MAX
from .replies import OK, Map

HELP = [b"DEBUG <subcommand> [<arg> ...]. Subcommands are:",
        b"CLOCK", b"    Return the daemon's clock: now (ms epoch), offset from real time, frozen.",
        b"CLOCK ADVANCE <ms>", b"    Move the clock forward.",
        b"CLOCK FREEZE [<ms-epoch>]", b"    Stop the clock now, or at a later moment.",
        b"CLOCK RESUME", b"    Let the clock run again from where it stands.",
        b"HELP", b"    Print this help."]


def debug(client, args):
    server = client.server
    if not server.settings.enable_debug_command:
        raise errors.DEBUG_NOT_ALLOWED
    sub = args[1].upper()
    n = len(args)
    if sub == b"HELP" and n == 2:
        return HELP
    if sub != b"CLOCK":
        raise errors.unknown_subcommand(args[1], "debug")
    clock = server.clock
    if n == 2:
        return Map([(b"now", server.now_ms()), (b"offset", clock.offset), (b"frozen", int(clock.frozen))])
    action = args[2].upper()
    if action == b"ADVANCE" and n == 4:
        clock.advance(in_range(args[3], "ms", 0, MS_MAX))
    elif action == b"FREEZE" and n in (3, 4):
        now = server.now_ms()          # read once: a second read may be a millisecond later
        at = in_range(args[3], "ms-epoch", 0, MS_MAX) if n == 4 else now
        if at < now:
            raise errors.CLOCK_BACKWARDS
        clock.freeze(at)
    elif action == b"RESUME" and n == 3:
        clock.resume()
    else:
        raise errors.SYNTAX
    return OK
