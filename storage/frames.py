"""The write-ahead log's containers: segment files and the frames that
carry records.  What a record's type and body mean is storage/records.py.

All integers are little-endian (``struct`` format ``'<'``).

Segment files
-------------
The log is a directory of segment files named ``seg-<20-digit number>.wal``,
so name order is log order.  Records are only added after the last one; a
new segment starts when the current one reaches ``segment-size`` bytes, and
at every start of the daemon (so new writes never follow a torn tail).  The
writer reserves room ahead of its writes (zeros), and cuts it off when the
segment is sealed (durably, before any record of the next segment is) or
the daemon stops.  So after a crash the last segment that holds records,
or the one before it (a crash as it was sealed), may end in that room:
there, zeros from a frame's start to the end of the file are the end of
the segment's records, not a torn tail and not corruption
(``reserved_from``).  In an older segment they are damage.  Each file begins with a
24-byte header::

    magic    8s   b"LEASEQWL"
    version  u16  format version, currently 1
    flags    u16  reserved, 0
    number   u64  the segment number (as in the file name)
    crc      u32  CRC32C of the 20 bytes above

Record frames
-------------
After the header come records, back to back::

    crc      u32  CRC32C of the 5 header bytes that follow and of the body
    length   u32  length of the body in bytes
    type     u8   record type (below)
    body     length bytes

A frame whose length runs past the end of the file, or whose CRC does not
match, is where the readable log ends.  In the newest segment that is a torn
tail (a write cut short by a crash) and recovery truncates it; anywhere else
it is corruption and the daemon refuses to start, naming file and offset.
"""

from __future__ import annotations

import re
import struct
from typing import Iterator

from crc32c import crc32c

MAGIC = b"LEASEQWL"
VERSION = 1

SEGMENT_HEADER = struct.Struct("<8sHHQ")
SEGMENT_HEADER_SIZE = SEGMENT_HEADER.size + 4
FRAME = struct.Struct("<IIB")
FRAME_SIZE = FRAME.size
_LEN_TYPE = struct.Struct("<IB")


class FormatError(ValueError):
    """A segment header, frame or record body that does not decode:
    corruption or a bug, never bad input."""


# -- framing -----------------------------------------------------------------

def segment_header(number: int) -> bytes:
    head = SEGMENT_HEADER.pack(MAGIC, VERSION, 0, number)
    return head + struct.pack("<I", crc32c(head))


def header_fields(data: bytes, header: struct.Struct, what: str) -> tuple:
    """The fields of a file's header: ``header`` followed by the CRC32C of
    its bytes (a segment's, a snapshot's), or FormatError naming ``what``."""
    if len(data) < header.size + 4:
        raise FormatError(f"{what} header is short")
    head = data[:header.size]
    (crc,) = struct.unpack_from("<I", data, header.size)
    if crc32c(head) != crc:
        raise FormatError(f"{what} header checksum mismatch")
    return header.unpack(head)


def check_segment_header(data: bytes) -> int:
    """Return the segment number, or raise FormatError."""
    magic, version, _flags, number = header_fields(data, SEGMENT_HEADER, "segment")
    if magic != MAGIC:
        raise FormatError("not a leaseq segment (bad magic)")
    if version != VERSION:
        raise FormatError(f"segment format version {version} is not supported (this daemon reads {VERSION})")
    return number


def frame(rtype: int, body: bytes) -> bytes:
    lt = _LEN_TYPE.pack(len(body), rtype)
    return struct.pack("<I", crc32c(body, crc32c(lt))) + lt + body


def read_frame(data, offset: int):
    """Decode the frame at ``offset``: ``(rtype, body, next_offset)``.

    Returns ``None`` if the frame is incomplete or its checksum does not match
    (the caller decides whether that is a torn tail or corruption).
    """
    if offset + FRAME_SIZE > len(data):
        return None
    crc, length, rtype = FRAME.unpack_from(data, offset)
    end = offset + FRAME_SIZE + length
    if end > len(data):
        return None
    if not checksum_holds(data, offset, end, crc):
        return None
    return rtype, bytes(data[offset + FRAME_SIZE:end]), end


def checksum_holds(data, offset: int, end: int, crc: int) -> bool:
    """Whether the frame from ``offset`` to ``end`` in ``data`` has the CRC
    ``crc`` (its header's): the CRC32C of its length, type and body, in
    one pass (``frame`` computes the same in two: length and type, then body)."""
    return crc32c(data[offset + 4:end]) == crc


_NOT_ZERO = re.compile(rb"[^\x00]")


def next_nonzero(data, offset: int) -> int:
    """The offset of the first byte at or after ``offset`` that is not zero
    (``len(data)`` when there is none)."""
    m = _NOT_ZERO.search(data, offset)
    return m.start() if m else len(data)


def reserved_from(data, offset: int) -> bool:
    """Whether every byte of ``data`` from ``offset`` on is zero: room the
    writer reserved and never wrote (the module docstring)."""
    return next_nonzero(data, offset) == len(data)


def iter_frames(data, offset: int) -> Iterator[tuple[int, int, bytes]]:
    """Yield ``(offset, rtype, body)`` for each valid frame from ``offset`` on;
    stops at the first frame that is incomplete or fails its checksum."""
    while True:
        got = read_frame(data, offset)
        if got is None:
            return
        rtype, body, nxt = got
        yield offset, rtype, body
        offset = nxt
