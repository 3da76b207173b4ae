"""One client connection: an asyncio Protocol that is thin glue.

Bytes in → ``RequestParser`` → commands run in order by ``dispatch.execute``
→ replies encoded for this connection's protocol (RESP2 or RESP3).  All the
replies of one read are written with one ``write``.

Replies stay in order.  ``execute`` returns each reply with its command's
``Ticket`` (``storage.wal``); the connection's ``Outbox`` (``daemon.outbox``,
sans-IO, where the rules are written and unit-tested) holds a reply until
the generation holding its records is written (end of the event-loop turn),
or durable when they need fsync (group commit, see ``daemon.committer``),
and every reply after it waits behind it.  So no reply ever gets ahead of
its record.  A blocked QCLAIM stops the processing of commands pipelined
after it until it is answered, as in Redis; what it logged before it parked
(a queue it created) holds its place in the outbox, so its eventual reply
waits for that as well.  A command a pause holds back (CLIENT PAUSE,
daemon/pause.py) goes back to the front of the pending commands, and they
run when the pause lets them.

Flow control: when the transport's write buffer is over its high-water mark
the connection stops reading (a client that does not read its replies stops
being served); past ``client-output-buffer-limit`` it is disconnected.  The
high-water mark is at most that limit, so the buffer's size is looked at
only while the transport says it is over the mark (``pause_writing``), not
after every write.
"""

from __future__ import annotations

import logging
import socket
from time import monotonic
from collections import deque

from leaseq.commands import errors
from leaseq.commands.claims import ClaimWait
from leaseq.commands.parties import Caller
from leaseq.commands.results import ResultWait
from leaseq.commands.replies import NO_REPLY, Postponed

from leaseq.storage.wal import Ticket

from .dispatch import execute
from .holdings import Holdings
from .outbox import Outbox
from .resp import ProtocolError, RequestParser, encode

log = logging.getLogger(__name__)


class Connection(Caller):
    """An asyncio protocol (the loop calls ``connection_made``,
    ``data_received``, ``connection_lost``, ``pause_writing`` and
    ``resume_writing``; it asks for no base class)."""

    __slots__ = ("parser", "transport", "id", "addr", "laddr", "fd", "name", "user", "lib_name", "lib_ver", "created",
                 "last_active", "pending", "outbox", "waiting", "protocol_error", "quitting", "closed",
                 "writing_paused", "committer", "disk")     # and Caller's

    def __init__(self, server) -> None:
        self.server = server
        self.committer = server.committer  # what the turn hands held replies and woken queues (None until the server listens)
        self.disk = server.disk            # while it rebuilds the store, no command runs (daemon/faults.py)
        s = server.settings
        self.parser = RequestParser(max_args=s.max_args, max_bulk=s.proto_max_bulk_len)
        self.transport = None
        self.id = 0
        self.addr = self.laddr = "?"
        self.fd = -1
        # client state the commands read and change
        self.name = None
        self.resp3 = False
        self.authenticated = not server.auth_required
        self.user = "default"
        self.acl_user = server.acl.default     # what this connection may do (commands.acl.User)
        self.lib_name = self.lib_ver = ""
        self.multi = None
        self.multi_dirty = False
        self.in_exec = False
        self.last_command = "NULL"
        self.created = self.last_active = monotonic()
        # processing state
        self.pending: deque = deque()
        self.outbox = Outbox()             # encoded replies, in order, each waiting for its record
        self.waiting = None                # the blocking.Waiter while a QCLAIM is parked
        self.protocol_error = None
        self.quitting = False
        self.closed = False
        self.writing_paused = False        # the transport's buffer is over its high-water mark
        self.holdings = Holdings(self)     # SESSION leases and work streams (daemon/holdings.py)

    # -- the protocol ------------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
            self.fd = sock.fileno()
        peer = transport.get_extra_info("peername")
        local = transport.get_extra_info("sockname")
        self.addr = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.laddr = f"{local[0]}:{local[1]}" if local else "?"
        self.limit_output()
        self.server.admission.register(self)

    def data_received(self, data: bytes) -> None:
        self.last_active = monotonic()
        try:
            commands = self.parser.feed(data)
        except ProtocolError as e:
            commands = e.commands
            self.protocol_error = str(e)
            self.server.stats.protocol_errors += 1
            self.transport.pause_reading()
        self.pending.extend(commands)
        self.run_pending()

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.pending.clear()
        self.outbox.clear()
        if self.waiting is not None:
            self.server.blocking.cancel(self.waiting)
            self.waiting = None
        self.holdings.release_all()
        self.server.unregister(self)

    def pause_writing(self) -> None:
        self.writing_paused = True
        self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.writing_paused = False
        if not self.closed and self.protocol_error is None:
            self.transport.resume_reading()

    # -- running commands ---------------------------------------------------------------

    def run_pending(self) -> None:
        committer = self.committer
        pending = self.pending
        if committer.closed:             # shut down: nothing more runs
            pending.clear()
        if self.disk.rebuilding:         # the store may hold refused changes: wait (daemon/faults.py)
            return
        while pending and self.waiting is None and not self.quitting and not self.closed:
            args = pending.popleft()
            reply, ticket = execute(self, args)
            kind = type(reply)
            if kind is ClaimWait or kind is ResultWait:
                if self.server.stopping:
                    reply = reply.expired()
                else:
                    if ticket is not None:
                        self.outbox.hold_place(ticket)   # its reply comes later, behind this
                        committer.wait(self)
                    if kind is ClaimWait:
                        committer.blocking.park(self, reply)
                    else:
                        committer.blocking.results.park(self, reply)
                    break
            elif kind is Postponed:              # a pause holds it back: kept, with what follows (daemon/pause.py)
                pending.appendleft(args)
                self.server.pause.hold(self)
                break
            if reply is not NO_REPLY and self.outbox.add(encode(reply, self.resp3), ticket):   # (answer)
                committer.wait(self)
        if self.protocol_error is not None and not pending and self.waiting is None and not self.quitting:
            self.answer(errors.protocol_error(self.protocol_error))
            self.quitting = True
        self._write(self.outbox.take())                                                        # (flush)
        if not self.outbox.held:
            committer.serve_now()
        if self.outbox.held or committer.work_left():
            committer.touch()

    def answer(self, reply, ticket: Ticket | None = None) -> None:
        """Queue a reply (see the module docstring): held on ``ticket`` when
        the command logged records, behind any reply held before it."""
        if reply is NO_REPLY:
            return
        if self.outbox.add(encode(reply, self.resp3), ticket):
            self.committer.wait(self)

    def unblock(self, reply, ticket: Ticket | None = None) -> None:
        """A parked QCLAIM got its answer (jobs, timeout, or an error)."""
        self.waiting = None
        if self.closed:
            return
        self.answer(reply, ticket)
        self.run_pending()

    def flush(self) -> None:
        """Write the replies that wait for nothing."""
        self._write(self.outbox.take())

    def release(self, wal) -> bool:
        """Write the held replies whose tickets ``wal`` has now reached, in
        order; True when none are left."""
        self._write(self.outbox.release(wal.reached))
        return not self.outbox.held

    def fail_held(self, error, unseen) -> None:
        """The log failed: held replies whose records did not get where their
        tickets needed become ``error``, held reads ``unseen``, in order
        (``Outbox.fail``)."""
        self._write(self.outbox.fail(encode(error, self.resp3), encode(unseen, self.resp3)))

    def _write(self, data: bytes) -> None:
        """Send ``data``; after QUIT, close once nothing is held any more."""
        if self.closed:
            return
        if data:
            self.transport.write(data)
            if self.writing_paused:          # (the write may have just set it)
                self._check_output()
        if self.quitting and not self.outbox.held:
            self.transport.close()

    def limit_output(self) -> None:
        """Put the transport's high-water mark at ``client-output-buffer-limit``
        or below (at connect, and when CONFIG SET changes the limit), so that
        a buffer past the limit is always one the transport has paused."""
        limit = self.server.settings.client_output_buffer_limit
        self.transport.set_write_buffer_limits(high=min(limit, 1 << 20) if limit else None)
        if self.writing_paused:
            self._check_output()

    def _check_output(self) -> None:
        limit = self.server.settings.client_output_buffer_limit
        if limit and self.transport.get_write_buffer_size() > limit:
            log.warning("closing client id=%d addr=%s: output buffer over client-output-buffer-limit (%d bytes)",
                        self.id, self.addr, limit)
            self.kill()

    # -- used by commands ----------------------------------------------------------------

    def close_after_reply(self) -> None:
        self.quitting = True

    def kill(self) -> None:
        if not self.closed and self.transport is not None:
            self.transport.abort()

    def reset(self) -> None:
        self.holdings.release_all()
        self.resp3 = False
        self.name = None
        self.multi = None
        self.multi_dirty = False
        self.authenticated = not self.server.auth_required
        self.user = "default"
        self.acl_user = self.server.acl.default

    @property
    def flags(self) -> str:
        if self.waiting is not None:
            return "b"
        return "x" if self.multi is not None else "N"

    @property
    def multi_len(self) -> int:
        return -1 if self.multi is None else len(self.multi)

    @property
    def query_buffer(self) -> int:
        return self.parser.pending

    @property
    def output_buffer(self) -> int:
        return self.transport.get_write_buffer_size() if self.transport else 0

