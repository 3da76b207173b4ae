"""DEBUG: test helpers, refused unless the server runs with
``enable-debug-command yes`` (as Redis does).

``DEBUG CLOCK``                    map: now, offset, frozen
``DEBUG CLOCK ADVANCE ms``         move the daemon's clock forward
``DEBUG CLOCK FREEZE [ms-epoch]``  stop it (at now, or at a later moment)
``DEBUG CLOCK RESUME``             let it run again from where it stands

``DEBUG FAULT``                    map: the errors the log pretends to get
``DEBUG FAULT WRITE|FSYNC|RESERVE errno``
                                   make every write (after half its bytes),
                                   every fsync of the log, or every
                                   reservation of room in a segment file fail
                                   with ENOSPC or EIO; ``NONE`` stops it (the
                                   disk is back)
``DEBUG FAULT SLOW ms``            make every fsync of the log wait ms first
                                   (a slow disk; 0 stops it)
``DEBUG SLEEP seconds``            stop the whole daemon that long (decimals
                                   allowed, at most 10), as Redis's does: what
                                   clients send meanwhile waits in their
                                   sockets and is read in one turn after it

The clock only ever moves forward.  Its state is logged, so a restart keeps
the test's time.  Leases, delays, backoff, EXPIRE and retention all read this
clock, so tests move time instead of sleeping.
"""

from __future__ import annotations

import errno
import time

from . import errors
from .args import in_range, to_float
from .queues import MS_MAX
from .replies import OK, Map

HELP = [b"DEBUG <subcommand> [<arg> ...]. Subcommands are:",
        b"CLOCK", b"    Return the daemon's clock: now (ms epoch), offset from real time, frozen.",
        b"CLOCK ADVANCE <ms>", b"    Move the clock forward.",
        b"CLOCK FREEZE [<ms-epoch>]", b"    Stop the clock now, or at a later moment.",
        b"CLOCK RESUME", b"    Let the clock run again from where it stands.",
        b"FAULT", b"    Return the errors the log's writes, fsyncs and reservations are made to fail with.",
        b"FAULT WRITE|FSYNC|RESERVE ENOSPC|EIO|NONE",
        b"    Make the log's writes, fsyncs or reservations of room fail (NONE: the disk is back).",
        b"FAULT SLOW <ms>", b"    Make every fsync of the log wait that long first (0: no more).",
        b"SLEEP <seconds>", b"    Stop the server for <seconds>. Decimals allowed.",
        b"HELP", b"    Print this help."]


def debug(client, args):
    server = client.server
    if not server.settings.enable_debug_command:
        raise errors.DEBUG_NOT_ALLOWED
    sub = args[1].upper()
    n = len(args)
    if sub == b"HELP" and n == 2:
        return HELP
    if sub == b"FAULT":
        return _fault(server, args)
    if sub == b"SLEEP":
        return _sleep(args)
    if sub != b"CLOCK":
        raise errors.unknown_subcommand(args[1], "debug")
    if n > 2 and server.disk_error is not None:
        raise errors.misconf(server.disk_error)        # moving the clock logs a record
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


SLOWEST = 10_000      # DEBUG FAULT SLOW's largest wait, ms (and DEBUG SLEEP's, in seconds)
FAULTS = {b"ENOSPC": errno.ENOSPC, b"EIO": errno.EIO, b"NONE": 0}


def _fault(server, args):
    faults = server.faults
    if len(args) == 2:
        name = {v: k for k, v in FAULTS.items()}
        return Map([(b"write", name.get(faults.write, b"%d" % faults.write)),
                    (b"fsync", name.get(faults.fsync, b"%d" % faults.fsync)),
                    (b"reserve", name.get(faults.reserve, b"%d" % faults.reserve)),
                    (b"slow", faults.slow)])
    if len(args) == 4 and args[2].upper() == b"SLOW":
        faults.slow = in_range(args[3], "ms", 0, SLOWEST)
        return OK
    if len(args) != 4 or args[2].upper() not in (b"WRITE", b"FSYNC", b"RESERVE") or args[3].upper() not in FAULTS:
        raise errors.SYNTAX
    setattr(faults, args[2].lower().decode(), FAULTS[args[3].upper()])
    return OK


def _sleep(args):
    if len(args) != 3:
        raise errors.SYNTAX
    seconds = to_float(args[2], "seconds")
    if not 0 <= seconds <= SLOWEST / 1000:
        raise errors.out_of_range("seconds", 0, SLOWEST // 1000)
    time.sleep(seconds)       # the loop's thread: nothing else runs meanwhile, which is the point
    return OK
