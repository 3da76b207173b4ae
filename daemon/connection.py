"""One client connection: an asyncio Protocol that is thin glue.

Bytes in → ``RequestParser`` → commands run in order by ``dispatch.execute``
→ replies encoded for this connection's protocol (RESP2 or RESP3).  All the
replies of one read are written with one ``write``.

Replies stay in order.  ``execute`` returns each reply with its command's
``Ticket`` (``storage.wal``): when the command appended log records, the
reply is *held* until the generation holding them is written (end of the
event-loop turn), or durable when they need fsync (group commit, see
``daemon.committer``); every reply after it on this connection waits behind
it.  So no reply ever gets ahead of its record.  A blocked QCLAIM stops the
processing of commands pipelined after it until it is answered, as in Redis;
what it logged before it parked (a queue it created) is held too, so its
eventual reply waits for that as well.

Flow control: when the transport's write buffer is over its high-water mark
the connection stops reading (a client that does not read its replies stops
being served); past ``client-output-buffer-limit`` it is disconnected.
"""

from __future__ import annotations

import logging
import socket
import time
from collections import deque

import asyncio

from leaseq.commands import errors
from leaseq.commands.jobs import ClaimWait
from leaseq.commands.replies import NO_REPLY

from leaseq.storage.wal import Ticket

from .blocking import Session
from .dispatch import execute
from .resp import ProtocolError, RequestParser, encode

log = logging.getLogger(__name__)


class Connection(asyncio.Protocol):
    def __init__(self, server) -> None:
        self.server = server
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
        self.created = self.last_active = time.monotonic()
        # processing state
        self.pending: deque = deque()
        self.out: list[bytes] = []
        self.held: deque = deque()         # (Ticket or None, reply bytes) waiting for the log
        self.waiting = None                # the blocking.Waiter while a QCLAIM is parked
        self.protocol_error = None
        self.quitting = False
        self.closed = False
        self._session = None               # SESSION leases (blocking.Session)
        self.workers: list = []            # work streams (blocking.Worker)
        self.subscriptions = 0             # of them, those started by SUBSCRIBE (RESP2: pub/sub context)

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
        limit = self.server.settings.client_output_buffer_limit
        if limit:
            transport.set_write_buffer_limits(high=min(limit, 1 << 20))
        self.server.admission.register(self)

    def data_received(self, data: bytes) -> None:
        self.last_active = time.monotonic()
        try:
            commands = self.parser.feed(data)
        except ProtocolError as e:
            commands = e.commands
            self.protocol_error = str(e)
            self.server.stats.protocol_errors += 1
            self.transport.pause_reading()
        if self.pending:
            self.pending.extend(commands)
        else:
            self.pending = deque(commands)
        self.run_pending()

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.pending.clear()
        self.held.clear()
        if self.waiting is not None:
            self.server.blocking.cancel(self.waiting)
            self.waiting = None
        self.release_holdings()
        self.server.unregister(self)

    def release_holdings(self) -> None:
        """SESSION and QWORK leases go back to ready the moment we let go."""
        server = self.server
        if server.committer is None or server.committer.closed:
            return
        now = server.now_ms()
        if self._session is not None:
            self._session.release_all(server.store, now)
            self._session = None
        for worker in self.workers:
            server.blocking.remove_worker(worker)
            worker.release_all(server.store, now)
        self.workers = []
        self.subscriptions = 0
        server.committer.touch()

    def drop_holdings(self) -> None:
        """The store these leases live in is being rebuilt from disk (a disk
        fault): forget them without logging; their deadlines still run."""
        self._session = None
        self.workers = []
        self.subscriptions = 0

    def pause_writing(self) -> None:
        self.transport.pause_reading()

    def resume_writing(self) -> None:
        if not self.closed and self.protocol_error is None:
            self.transport.resume_reading()

    # -- running commands ---------------------------------------------------------------

    def run_pending(self) -> None:
        server = self.server
        pending = self.pending
        if server.committer.closed:      # shut down: nothing more runs
            pending.clear()
        while pending and self.waiting is None and not self.quitting and not self.closed:
            reply, ticket = execute(self, pending.popleft())
            if type(reply) is ClaimWait:
                if server.stopping:
                    reply = reply.expired()
                else:
                    if ticket is not None:
                        self._hold(ticket, b"")      # its reply comes later, behind this
                    server.blocking.park(self, reply)
                    break
            self.answer(reply, ticket)
        if self.protocol_error is not None and not pending and self.waiting is None and not self.quitting:
            self.answer(errors.protocol_error(self.protocol_error))
            self.quitting = True
        self.flush()
        if self.held or server.committer.work_left():
            server.committer.touch()

    def answer(self, reply, ticket: Ticket | None = None) -> None:
        """Queue a reply (see the module docstring): held on ``ticket`` when
        the command logged records, behind any reply held before it."""
        if reply is NO_REPLY:
            return
        data = encode(reply, self.resp3)
        if ticket is not None:
            self._hold(ticket, data)
        elif self.held:
            self.held.append((None, data))
        else:
            self.out.append(data)

    def _hold(self, ticket: Ticket, data: bytes) -> None:
        self.held.append((ticket, data))
        self.server.committer.wait(self)

    def unblock(self, reply, ticket: Ticket | None = None) -> None:
        """A parked QCLAIM got its answer (jobs, timeout, or an error)."""
        self.waiting = None
        if self.closed:
            return
        self.answer(reply, ticket)
        self.run_pending()

    def flush(self) -> None:
        if self.out and not self.closed:
            out = self.out
            self.out = []
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))
            self._check_output()
        if self.quitting and not self.held and not self.closed:
            self.transport.close()

    def release(self, wal) -> bool:
        """Write the held replies whose tickets ``wal`` has now reached, in
        order; True when none are left."""
        held = self.held
        chunks = []
        while held:
            ticket, data = held[0]
            if ticket is not None and not wal.reached(ticket):
                break
            chunks.append(data)
            held.popleft()
        if chunks and not self.closed:
            self.transport.write(b"".join(chunks))
            self._check_output()
            if self.quitting and not held:
                self.transport.close()
        return not held

    def fail_held(self, error) -> None:
        """The log failed: every held reply whose records did not get where
        its ticket needed becomes ``error`` (they will not be found after a
        restart either), in order."""
        failed = encode(error, self.resp3)
        # replies with no ticket (reads behind a write) stand; b"" holds the
        # place of a parked claim, which gets its own answer
        chunks = [data if ticket is None else failed for ticket, data in self.held if data]
        self.held.clear()
        if chunks and not self.closed:
            self.transport.write(b"".join(chunks))
            self._check_output()
            if self.quitting:
                self.transport.close()

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

    def session(self):
        """The holder of this connection's SESSION leases."""
        if self._session is None:
            self._session = Session(self)
        return self._session

    def start_work(self, request) -> None:
        self.server.blocking.add_worker(self, request)
        self.subscriptions = len(self.channels())

    def stop_work(self, channel: bytes) -> None:
        """UNSUBSCRIBE: that stream's leases go back to ready now."""
        for worker in self.workers:
            if worker.channel == channel:
                self.server.blocking.remove_worker(worker)
                worker.release_all(self.server.store, self.server.now_ms())
                self.server.committer.touch()
                self.work_ended(worker)
                break

    def work_ended(self, worker) -> None:
        """A stream is over (UNSUBSCRIBE, or its queue was dropped)."""
        if worker in self.workers:
            self.workers.remove(worker)
        self.subscriptions = len(self.channels())

    def channels(self) -> list[bytes]:
        return [w.channel for w in self.workers if w.channel is not None]

    def works_through_another_stream(self, queue: bytes, channel: bytes | None) -> bool:
        return any(w.queue.name == queue and w.channel != channel for w in self.workers)

    def reset(self) -> None:
        self.release_holdings()
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
