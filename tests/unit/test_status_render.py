"""The status page without a socket (leaseq.daemon.status): ``render`` is a
pure function of a ``Status``, and ``RateSamples`` a pure function of the
counters it was shown; tests/integration/test_status_page.py drives the
real daemon."""

from __future__ import annotations

import pytest

from leaseq.daemon.html import cut, duration
from leaseq.daemon.status import MAX_ERROR_BYTES, DeadLetter, QueueRow, RateSamples, Status, render
from leaseq.storage.config import QueueConfig
from leaseq.storage.queue import Queue

NOW = 1_800_000_000.0
COUNTS = {"ready": 0, "delayed": 0, "in_flight": 0, "dead": 0, "completed": 0, "waiting": 0, "cancelled": 0}


def info(**persistence) -> dict:
    """INFO's sections as ``read_status`` hands them over (the fields the page reads)."""
    ready = {"loading": 0, "log_write_status": "ok", "log_write_error": "", "dir": "/srv/leaseq",
             "wal_segments": 3, "wal_current_segment": 7, "wal_bytes": 5 << 20, "wal_bytes_written": 1 << 20,
             "last_fsync_duration_ms": 2, "last_fsync_time_ms": int(NOW * 1000) - 400, "fsyncs": 12,
             "default_durability": "fsync", "lease_durability": "async", "fsync_interval_ms": 1000,
             "snapshot_in_progress": 0, "last_snapshot_time": int(NOW) - 90, "last_snapshot_status": "ok",
             "last_snapshot_duration_ms": 250, "last_snapshot_bytes": 3 << 20, "snapshots_taken": 1,
             "log_bytes_since_snapshot": 1 << 20, "snapshot_min_bytes": 64 << 20, "archive_dir": "",
             "recovery_snapshot": "none", "recovery_records": 0, "recovery_seconds": "0.010", "boot_epoch": 4}
    return {
        "server": {"leaseq_version": "0.1.0", "uptime_in_seconds": 3725, "tcp_port": 6390, "process_id": 42},
        "clients": {"connected_clients": 12, "blocked_clients": 3},
        "memory": {"used_memory_rss": 48 << 20, "jobs_live": 1234},
        "stats": {"instantaneous_ops_per_sec": 950},
        "persistence": persistence or ready,
    }


def status(queues=(), dead=(), queue_count=None, **persistence) -> Status:
    return Status(now=NOW, info=info(**persistence), queues=list(queues),
                  queue_count=len(queues) if queue_count is None else queue_count, dead_letters=list(dead))


def row(name: str, push_rate: float = 0.0, **counts) -> QueueRow:
    return QueueRow(name=name, durability="fsync", counts=dict(COUNTS, **counts), push_rate=push_rate,
                    ack_rate=0.0, oldest_ready_ms=0)


def test_a_ready_daemon_shows_its_header_queues_and_log():
    page = render(status([row("emails", ready=3, dead=1)]))
    assert '<span class="state ok">ready</span>' in page
    assert "up <b>1 h 2 min</b>" in page and "clients <b>12 (3 blocked)</b>" in page
    assert '<td class="n">3</td>' in page and '<td class="n dead">1</td>' in page
    assert "<dt>segments</dt><dd>3, writing #7</dd>" in page
    assert "<dt>last fsync</dt><dd>400 ms ago, took 2 ms</dd>" in page
    assert "<dt>last</dt><dd>1 min 30 s ago, ok in 250 ms</dd>" in page
    assert page.endswith("</html>\n")


def test_a_daemon_without_queues_or_dead_letters_says_so():
    page = render(status())
    assert "No queues yet." in page and "<table>" not in page
    assert "Dead letters" in page and "None." in page


def test_while_loading_the_page_says_so_and_shows_no_log_figures():
    page = render(status(loading=1, loading_elapsed_ms=2300, dir="/srv/leaseq"))
    assert '<span class="state warn">loading</span>' in page
    assert "Recovering the data directory (2.3 s so far)" in page
    assert "<dt>segments</dt>" not in page and "<dt>for</dt><dd>2.3 s</dd>" in page
    assert "Listed once the data directory is recovered." in page and "Dead letters" not in page


def test_a_disk_error_is_named_with_what_it_means():
    p = dict(info()["persistence"], log_write_status="err", log_write_error="No space left on device")
    del p["wal_segments"], p["wal_current_segment"], p["wal_bytes"]      # the log is closed meanwhile
    page = render(status(**p))
    assert '<span class="state bad">disk error</span>' in page
    assert "The log cannot be written: No space left on device." in page
    assert "<dt>writable</dt><dd>no: No space left on device</dd>" in page


def test_every_text_from_outside_is_escaped():
    dead = DeadLetter(queue="<i>q</i>", id=1, state="dead", source="<src>", source_id=9, reason="nack",
                      deliveries=1, last_error='<b>"x"</b> & y')
    page = render(status([row("<i>q</i>")], [dead], dir="<dir>", loading=0, log_write_status="ok"))
    assert "<i>" not in page and "<b>&quot;" not in page and "<src>" not in page and "<dir>" not in page
    assert "&lt;i&gt;q&lt;/i&gt;" in page and "&lt;b&gt;&quot;x&quot;&lt;/b&gt; &amp; y" in page
    assert "&lt;src&gt; #9" in page


def test_a_long_list_is_cut_with_a_note():
    page = render(status([row(f"q{i}") for i in range(3)], queue_count=1200))
    assert page.count('<td class="name mono">') == 3
    assert "The first 3 of 1,200 queues by name" in page


@pytest.mark.parametrize("rate, cell", [
    (0.0, '<td class="n zero">0</td>'),
    (0.01, '<td class="n">&lt;0.1</td>'),
    (12.345, '<td class="n">12.3</td>'),
    (4321.0, '<td class="n">4,321</td>'),
])
def test_rates_read_as_people_read_them(rate, cell):
    assert cell in render(status([row("q", push_rate=rate)]))


@pytest.mark.parametrize("ms, text", [(0, "0 ms"), (999, "999 ms"), (1500, "1.5 s"), (61_000, "1 min 1 s"),
                                      (7_260_000, "2 h 1 min"), (90_000_000, "1 d 1 h")])
def test_durations(ms, text):
    assert duration(ms) == text


def test_an_error_is_cut_before_it_is_decoded():
    assert cut(None, MAX_ERROR_BYTES) == "" and cut(b"short", MAX_ERROR_BYTES) == "short"
    long = cut(b"x" * (MAX_ERROR_BYTES + 1), MAX_ERROR_BYTES)
    assert long == "x" * MAX_ERROR_BYTES + " …"


def queue(name: bytes, pushed: int, acked: int) -> Queue:
    q = Queue(1, name, QueueConfig())
    q.counters.pushed, q.counters.acked = pushed, acked
    return q


def test_a_rate_is_the_rise_since_the_oldest_sample_that_holds_the_queue():
    rates = RateSamples(keep=3)
    rates.sample([queue(b"a", 0, 0)], 100.0)
    rates.sample([queue(b"a", 10, 0), queue(b"b", 0, 0)], 101.0)
    now_a, now_b = queue(b"a", 40, 20), queue(b"b", 6, 3)
    assert rates.rates(now_a, 102.0) == (20.0, 10.0)          # since the sample at 100
    assert rates.rates(now_b, 102.0) == (6.0, 3.0)            # b appeared at 101
    rates.sample([now_a], 102.0)
    rates.sample([now_a], 103.0)                              # the sample at 100 falls out of the ring
    assert rates.rates(queue(b"a", 60, 20), 104.0) == (50 / 3, 20 / 3)     # since the sample at 101


def test_no_rate_from_too_short_a_span_or_from_counters_that_started_over():
    rates = RateSamples()
    rates.sample([queue(b"a", 100, 100)], 10.0)
    assert rates.rates(queue(b"a", 200, 200), 10.2) == (0.0, 0.0)    # 0.2 s: too short to say
    assert rates.rates(queue(b"a", 5, 0), 12.0) == (0.0, 0.0)        # dropped and made again
    assert rates.rates(queue(b"z", 5, 0), 12.0) == (0.0, 0.0)        # never sampled


def with_replication(**fields) -> Status:
    s = status()
    s.info["replication"] = fields
    return s


def test_the_header_says_the_role_and_a_replica_says_what_it_refuses():
    assert "role <b>primary</b>" in render(with_replication(role="master", connected_slaves=0))
    assert "role <b>primary, 2 replicas</b>" in render(with_replication(role="master", connected_slaves=2))
    page = render(with_replication(role="slave", master_host="10.0.0.5", master_port=6479, master_link_status="up"))
    assert '<span class="state ok">replica</span>' in page
    assert "role <b>replica of 10.0.0.5:6479, link up</b>" in page
    assert "A replica of 10.0.0.5:6479: it answers reads" in page and "-READONLY" in page
    page = render(with_replication(role="slave", master_host="10.0.0.5", master_port=6479,
                                   master_link_status="down", master_link_down_since_seconds=12))
    assert '<span class="state warn">replica, link down</span>' in page
    assert "whose link has been down for 12 s" in page


def test_a_shutdown_or_a_failover_that_holds_writes_says_so():
    s = with_replication(role="master", connected_slaves=1, master_failover_state="waiting-for-sync")
    page = render(s)
    assert '<span class="state warn">failing over</span>' in page
    assert "role to a replica (FAILOVER, waiting-for-sync): commands that change queues wait" in page
    s = with_replication(role="master", connected_slaves=1, master_failover_state="no-failover")
    s.info["server"]["shutdown_in_milliseconds"] = 8500
    page = render(s)
    assert '<span class="state warn">stopping</span>' in page
    assert "Shutting down once every replica has all this node wrote (8.5 s at most)" in page


def test_a_replicas_buttons_are_disabled_and_say_where_changes_go():
    queues = [row("emails", ready=3, dead=1)]
    primary = render(status(queues))
    assert 'value="pause"' in primary and " disabled" not in primary
    replica = render(Status(now=NOW, info=info(), queues=queues, queue_count=1, dead_letters=[], read_only=True))
    buttons = [b for b in replica.split("<button ")[1:] if 'title="Search: ' not in b]   # (a search is a read)
    assert buttons and all(" disabled " in b and "use the primary" in b for b in buttons)
    assert '<button type="submit" title="Search: emails">Search</button>' in replica
