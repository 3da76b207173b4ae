"""A replica's link to its primary (docs/replication.md).

``LinkReader`` is what the primary sends, read without I/O (unit-tested on
its own): one line for each handshake reply, the answer to PSYNC
(``+FULLRESYNC replid offset`` or ``+CONTINUE replid``), for a full sync the
snapshot as one bulk string (``$<length>\\r\\n`` then the bytes, no CRLF
after, as Redis sends its RDB; lone newlines before it are keep-alives),
then the log's frames, each checked by its CRC as recovery checks them.

``ReplicaLink`` is the connection: it sends ``PING``, ``AUTH`` (with
``masteruser``/``masterauth`` when set), ``REPLCONF listening-port``,
``ip-address`` (``replica-announce-ip``) and ``capa eof capa psync2``, then
``PSYNC`` with what this node holds (``? -1`` the first time), applies what
comes (``Roles.install_snapshot``, ``Roles.apply_frames``: daemon/roles.py) and sends
``REPLCONF ACK <offset>`` once a second, the offset being what is on its
disk.  A link that drops or fails is tried again after a second, with PSYNC
from where it stopped.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

from leaseq.storage.frames import FRAME, FRAME_SIZE, FormatError, checksum_holds

from .admission import keep_alive
from .resp import encode

log = logging.getLogger(__name__)

RETRY_S = 1.0
ACK_EVERY_S = 1.0
TEMPORARY = "snap-from-primary.snap.tmp"    # (recovery removes a *.snap.tmp a crash left)


class LinkError(Exception):
    """The primary sent what a replica cannot take."""


class LinkReader:
    """Bytes from the primary in, events out (see the module docstring):
    ``("line", bytes)``, ``("bulk", length)``, ``("chunk", bytes)``,
    ``("bulk_end",)``, ``("frames", their bytes, [(rtype, body), ...])``
    (the whole frames of one feed)."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.mode = "line"          # line, bulk_header, bulk, frames
        self.remaining = 0

    def feed(self, data: bytes) -> list[tuple]:
        buf = self.buf
        buf += data
        events: list[tuple] = []
        at = 0
        while True:
            mode = self.mode
            if mode == "frames":
                at = _frames(buf, at, events)
                break
            if mode == "bulk":
                take = min(self.remaining, len(buf) - at)
                if not take:
                    break
                events.append(("chunk", bytes(buf[at:at + take])))
                at += take
                self.remaining -= take
                if not self.remaining:
                    events.append(("bulk_end",))
                    self.mode = "frames"
            else:
                while at < len(buf) and buf[at] == 0x0A:     # keep-alive newlines
                    at += 1
                end = buf.find(b"\r\n", at)
                if end < 0:
                    break
                line = bytes(buf[at:end])
                at = end + 2
                if mode == "bulk_header":
                    if not line.startswith(b"$") or not line[1:].isdigit():
                        raise LinkError(f"expected the snapshot's length, got {line[:80]!r}")
                    self.remaining = int(line[1:])
                    events.append(("bulk", self.remaining))
                    self.mode = "bulk" if self.remaining else "frames"
                    if not self.remaining:
                        events.append(("bulk_end",))
                    continue
                events.append(("line", line))
                if line.startswith(b"+FULLRESYNC"):
                    self.mode = "bulk_header"
                elif line.startswith(b"+CONTINUE"):
                    self.mode = "frames"
        del buf[:at]
        return events


def _frames(buf: bytearray, at: int, events: list) -> int:
    """The whole frames in ``buf`` from ``at`` on, as one ``("frames",
    their bytes, [(rtype, body), ...])`` event (none if there is no whole
    frame); where the first incomplete frame starts.  Each frame's CRC is
    checked here (``checksum_holds``, as recovery checks it)."""
    data = bytes(buf)
    size = len(data)
    start = at
    got = []
    unpack = FRAME.unpack_from
    while size - at >= FRAME_SIZE:
        crc, length, rtype = unpack(data, at)
        end = at + FRAME_SIZE + length
        if end > size:
            break
        if not checksum_holds(data, at, end, crc):
            raise LinkError("a frame from the primary fails its checksum")
        got.append((rtype, data[at + FRAME_SIZE:end]))
        at = end
    if got:
        events.append(("frames", data[start:at] if start or at < size else data, got))
    return at


class ReplicaLink(asyncio.Protocol):
    def __init__(self, server, host: str, port: int) -> None:
        self.server = server
        self.host = host
        self.port = port
        self.transport = None
        self.reader = LinkReader()
        self.state = "connect"        # connect, connecting, handshake, sync, connected (ROLE's words)
        self.up = False
        self.syncing = False
        self.last_io = 0.0
        self.stopped = False
        self._replies_due = 0         # handshake replies still to come before PSYNC
        self._full: tuple | None = None     # (replid, offset) of the full sync under way
        self._file = None
        self._held: list | None = None      # events that came while the snapshot was installed
        self._timer = None
        self._ack_timer = None
        self._task = None

    # -- life -------------------------------------------------------------------------------------

    def start(self) -> None:
        self.state = "connecting"
        self._task = self.server.loop.create_task(self._connect())

    async def _connect(self) -> None:
        try:
            await self.server.loop.create_connection(lambda: self, self.host, self.port)
        except OSError as e:
            log.warning("cannot reach the primary %s:%d: %s; trying again in %g s", self.host, self.port, e, RETRY_S)
            self._retry()

    def _retry(self) -> None:
        self.state = "connect"
        if not self.stopped:
            self._timer = self.server.loop.call_later(RETRY_S, self.start)

    def stop(self) -> None:
        self.stopped = True
        for timer in (self._timer, self._ack_timer):
            if timer is not None:
                timer.cancel()
        if self._task is not None:
            self._task.cancel()
        if self.transport is not None:
            self.transport.close()
        self._discard_file()

    def connection_made(self, transport) -> None:
        if self.stopped:
            transport.close()
            return
        self.transport = transport
        keep_alive(transport, self.server.settings.tcp_keepalive)   # a primary gone without closing is noticed
        self.reader = LinkReader()
        self.state = "handshake"
        self.last_io = time.monotonic()
        s = self.server.settings
        steps = [[b"PING"]]
        if s.masterauth:
            steps.append([b"AUTH"] + ([s.masteruser.encode()] if s.masteruser else []) + [s.masterauth.encode()])
        steps.append([b"REPLCONF", b"listening-port", str(s.replica_announce_port or self.server.listeners.port).encode()])
        if s.replica_announce_ip:
            steps.append([b"REPLCONF", b"ip-address", s.replica_announce_ip.encode()])
        steps.append([b"REPLCONF", b"capa", b"eof", b"capa", b"psync2"])
        self._replies_due = len(steps)
        self._steps = [step[0] for step in steps]
        transport.write(b"".join(encode(step, False) for step in steps))

    def connection_lost(self, exc) -> None:
        self.transport = None
        if self.up:
            log.warning("lost the link to the primary %s:%d%s", self.host, self.port, f": {exc}" if exc else "")
        self.up = False
        self.syncing = False
        self.server.replication.down_since = time.monotonic()
        self._discard_file()
        self._retry()

    def _fail(self, why: str) -> None:
        log.error("replication from %s:%d: %s; trying again in %g s", self.host, self.port, why, RETRY_S)
        if self.transport is not None:
            self.transport.close()

    def drop_if_silent(self, now: float, timeout: int) -> None:
        """``repl-timeout``: close a link the primary said nothing on for
        ``timeout`` seconds; it connects again (daemon/liveness.py)."""
        if self.transport is not None and now - self.last_io > timeout:
            self._fail(f"nothing from the primary for {now - self.last_io:.0f} s (repl-timeout {timeout} s)")

    # -- what comes ---------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self.last_io = time.monotonic()
        try:
            events = self.reader.feed(data)
        except LinkError as e:
            self._fail(str(e))
            return
        if self._held is not None:
            self._held.extend(events)
            return
        self._handle(events)

    def _handle(self, events: list) -> None:
        applied = False
        for i, event in enumerate(events):
            kind = event[0]
            if kind == "frames":
                try:
                    self.server.roles.apply_frames(event[1], event[2])
                except (FormatError, ValueError, KeyError) as e:
                    self._fail(f"a record from the primary does not apply ({e})")
                    return
                applied = True
            elif kind == "line":
                if not self._reply(event[1]):
                    return
            elif kind == "bulk":
                self._open_file()
            elif kind == "chunk":
                os.write(self._file[1], event[1])
            elif kind == "bulk_end":
                self._held = list(events[i + 1:])
                self.server.spawn(self._install())
                break
        if applied:
            self.server.committer.touch()

    def _reply(self, line: bytes) -> bool:
        """A line from the primary: a handshake reply, or PSYNC's answer."""
        if self._replies_due:
            self._replies_due -= 1
            step = self._steps[len(self._steps) - self._replies_due - 1]
            if line.startswith(b"-") and not (step == b"PING" and line.startswith(b"-NOAUTH")):
                if step in (b"PING", b"AUTH"):
                    self._fail(f"the primary answered {step.decode()} with {line[:200].decode(errors='replace')}")
                    return False
                log.warning("the primary answered %s with %s", step.decode(), line[:200].decode(errors="replace"))
            if not self._replies_due:
                self._psync()
            return True
        text = line.decode(errors="replace")
        if text.startswith("+FULLRESYNC"):
            words = text.split()
            if len(words) != 3 or not words[2].isdigit():
                self._fail(f"cannot read {text[:200]!r}")
                return False
            self._full = (words[1], int(words[2]))
            self.syncing = True
            self.state = "sync"
            log.info("full sync from %s:%d: history %s at offset %s", self.host, self.port, words[1], words[2])
            self.server.replication.failover.accepted()
            return True
        if text.startswith("+CONTINUE"):
            words = text.split()
            self.server.replication.continued(words[1] if len(words) > 1 else "")
            self._online()
            log.info("continuing from %s:%d at offset %d (partial sync)", self.host, self.port,
                     self.server.replication.offset)
            self.server.replication.failover.accepted()
            return True
        self._fail(f"the primary answered PSYNC with {text[:200]}")
        self.server.replication.failover.rejected(text[:200])
        return False

    def _psync(self) -> None:
        replication = self.server.replication
        if replication.offset or replication.replid2 != "0" * 40:
            args = [b"PSYNC", replication.replid.encode(), str(replication.offset + 1).encode()]
        else:
            args = [b"PSYNC", b"?", b"-1"]
        self.transport.write(encode(args + replication.failover.psync_args(), False))

    def _online(self) -> None:
        """Synced: say where it stands at once (as Redis's replica does), so
        a WAIT or a shutdown on the primary does not wait for the first
        periodic acknowledgement."""
        self.up = True
        self.syncing = False
        self.state = "connected"
        self.ack()
        self._schedule_ack()

    # -- the snapshot of a full sync ----------------------------------------------------------------

    def _open_file(self) -> None:
        path = os.path.join(self.server.datadir.directory, TEMPORARY)
        self._file = (path, os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))

    def _discard_file(self) -> None:
        if self._file is not None:
            path, fd = self._file
            self._file = None
            if fd >= 0:
                os.close(fd)
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    async def _install(self) -> None:
        path, fd = self._file
        os.fsync(fd)
        os.close(fd)
        self._file = (path, -1)
        try:
            await self.server.roles.install_snapshot(path)
        except Exception as e:                        # noqa: BLE001 - a bad snapshot: sync again
            log.error("the primary's snapshot does not install: %s", e)
            self._held = None
            self._discard_file()
            self._fail("its snapshot did not install")
            return
        self._file = None
        replid, offset = self._full
        self.server.replication.synced_from(replid, offset)
        log.info("full sync done: %d queues; streaming from offset %d", len(self.server.store.queues), offset)
        self._online()
        held, self._held = self._held, None
        if self.transport is not None:
            self._handle(held)

    # -- acknowledgements ----------------------------------------------------------------------------

    def _schedule_ack(self) -> None:
        if self._ack_timer is not None:
            self._ack_timer.cancel()
        self._ack_timer = self.server.loop.call_later(ACK_EVERY_S, self._ack_tick)

    def _ack_tick(self) -> None:
        if self.up and self.transport is not None:
            self.ack()
            self._schedule_ack()

    def ack(self) -> None:
        """REPLCONF ACK: how much of the stream is on this node's disk."""
        if self.transport is not None:
            offset = self.server.replication.durable_offset()
            self.transport.write(encode([b"REPLCONF", b"ACK", str(offset).encode()], False))
