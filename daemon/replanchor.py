"""A replica's anchor: what lets it continue with a partial sync after a
restart, a clean stop or a kill -9 alike (docs/replication.md, "Restarts").

A replica's log holds its primary's frames byte for byte, so the stream's
offset at the end of what it recovered is the offset at the start of one
of its log segments plus the bytes of the segments from there on.
``replication.anchor`` in the data directory holds that segment, that
offset and the history's replication id; it is written (and fsynced) when
the stream's start moves: after a full sync (the first segment of the new
log), at each snapshot's cut (the segments before it may go), when the
history is renamed upstream (``Replication.continued``); it is removed when
the node becomes a primary.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os

log = logging.getLogger(__name__)

ANCHOR_FILE = "replication.anchor"


class Anchor:
    def __init__(self, replication) -> None:
        self.replication = replication
        self._at: tuple[int, int] | None = None     # (offset, segment) written to the file

    def _path(self) -> str | None:
        datadir = self.replication.server.datadir
        return os.path.join(datadir.directory, ANCHOR_FILE) if datadir is not None else None

    def moved(self, segment: int | None = None) -> None:
        """A replica: write its history and the stream's offset now at the
        start of log segment ``segment`` (None: the segment it holds already,
        under a new replication id)."""
        replication = self.replication
        path = self._path()
        if not replication.following or path is None:
            return
        if segment is not None:
            self._at = (replication.offset, segment)
        if self._at is None:
            return
        offset, first = self._at
        with open(path + ".tmp", "w") as f:
            json.dump({"replid": replication.replid, "offset": offset, "segment": first}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(path + ".tmp", path)

    def drop(self) -> None:
        """The node became a primary: no anchor (a primary's restart starts a new history)."""
        self._at = None
        path = self._path()
        if path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def restore(self, datadir) -> bool:
        """Started as a replica, or writing again after a disk fault: the
        history and offset its log ends at, from the anchor and the
        segments after it, when they add up (none missing, none folded into
        the snapshot it started from); else False, and a full sync, as
        without the file."""
        path = os.path.join(datadir.directory, ANCHOR_FILE)
        try:
            with open(path) as f:
                saved = json.load(f)
            replid, offset, first = saved["replid"], int(saved["offset"]), int(saved["segment"])
        except FileNotFoundError:
            return False
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning("ignoring %s (%s): this replica syncs in full", path, e)
            return False
        held = datadir.stream_bytes_from(first)
        if held is None:
            log.info("the log no longer holds the stream from segment %d on: this replica syncs in full", first)
            return False
        replication = self.replication
        replication.replid = replid
        replication.set_offset(offset + held)
        self._at = (offset, first)
        log.info("holding history %s up to offset %d: asking to continue from there", replid, replication.offset)
        return True
