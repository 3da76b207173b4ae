"""The snapshot's format versions (storage.snapformat): a version-1
snapshot, written by an older leaseq, still loads."""

from __future__ import annotations

import os

from core import T0, ack, claim, close, nack, nack_dead, new_queue, open_store, push, push_key
from store_state import digest

from leaseq.storage import records, snapformat, snapshot

FIXTURE_V1 = os.path.join(os.path.dirname(__file__), "data", "snap-v1.snap")


def frames_of(path) -> list[tuple[int, int, bytes]]:
    """``(offset, type, body)`` of every frame of a snapshot file."""
    data = open(path, "rb").read()
    return list(records.iter_frames(data, snapformat.SNAPSHOT_HEADER_SIZE))


# -- versions -----------------------------------------------------------------------------------

def build_v1_fixture(store) -> None:
    """The store tests/unit/data/snap-v1.snap holds: written by leaseq before
    SNAP_PLAIN (commit 3bf3261, format version 1) from this store, on a fresh
    data directory at T0 (``take_snapshot(store)`` right after this)."""
    a = new_queue(store, b"a", retain_completed=60_000, deadletter="dl")
    b = new_queue(store, b"b", retain_dead=120_000)
    push(store, a, 5, priority=7)
    push(store, a, 2, delay=5_000)
    push_key(store, a, b"k1")
    jobs = claim(store, a, T0, count=3)
    ack(store, a, [jobs[0].token], T0)
    nack(store, a, [jobs[1].token], T0, error=b"boom")
    push(store, b, 3, max_deliveries=1)
    bj = claim(store, b, T0, count=1)
    nack_dead(store, b, [bj[0].token], T0, error=b"dead here")


def test_a_version_1_snapshot_still_loads(tmp_path):
    data = open(FIXTURE_V1, "rb").read()
    assert int.from_bytes(data[8:10], "little") == 1
    assert {t for _o, t, _b in frames_of(FIXTURE_V1)} >= {snapformat.SNAP_JOBS}
    store = open_store(tmp_path / "d", T0)
    build_v1_fixture(store)
    loaded, info = snapshot.load(FIXTURE_V1)
    assert digest(loaded) == digest(store, durable_only=True)
    assert (info.queues, info.jobs, info.bytes) == (2, 11, len(data))
    close(store)
