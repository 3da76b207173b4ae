"""Data directories written byte by byte, for the tests of recovery,
``leaseq check`` and the log readers: a segment file of given bytes, where
its last whole record ends, and a write torn by a crash after it."""

from __future__ import annotations

import os

from leaseq.storage import records
from leaseq.storage.wal import segment_name


def write_segment(directory, number: int, data: bytes, header: bytes | None = None) -> str:
    """A segment file ``number`` in ``directory``: its header (or ``header``)
    then ``data`` (framed records, or whatever damage a test wants)."""
    path = os.path.join(directory, segment_name(number))
    with open(path, "wb") as f:
        f.write(records.segment_header(number) if header is None else header)
        f.write(data)
    return path


def records_end(path) -> int:
    """Where the last whole record of a segment file ends: after a kill the
    room the daemon reserved ahead of its writes (zeros) follows it."""
    with open(path, "rb") as f:
        data = f.read()
    end = records.SEGMENT_HEADER_SIZE
    for offset, _rtype, body in records.iter_frames(data, end):
        end = offset + records.FRAME_SIZE + len(body)
    assert records.reserved_from(data, end), f"{path}: bytes after the last record that are not reserved room"
    return end


def write_torn(path, data: bytes) -> int:
    """Put ``data`` where a write cut short by a crash lands: right after the
    last record, over the reserved room.  Returns that offset."""
    end = records_end(path)
    with open(path, "r+b") as f:
        f.seek(end)
        f.write(data)
    return end
