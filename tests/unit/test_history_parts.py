"""The history's parts without a daemon: the histogram's percentiles, the
file format with a torn tail, the kept minutes' columns, and the charts'
HTML (storage/history.py, daemon/charts.py).  The daemon's own behaviour is
tests/integration/test_history.py's and test_history_page.py's."""

from __future__ import annotations

import math
import re

from hypothesis import given
from hypothesis import strategies as st
from leaseq.daemon.charts import UNITS, Charts, QueueChart, _nice, render_charts
from leaseq.storage.config import QueueConfig
from leaseq.storage.history import (
    NFIELDS,
    Histogram,
    History,
    Series,
    decode_file,
    encode,
    merge,
)
from leaseq.storage.store import Store


@given(st.lists(st.integers(min_value=0, max_value=(1 << 32) - 1), min_size=1, max_size=300))
def test_a_percentile_is_within_a_sixteenth_of_the_true_one(values):
    h = Histogram()
    for v in values:
        h.add(v)
    ordered = sorted(values)
    for p, got in zip((0.50, 0.95, 0.99), h.percentiles()):
        true = ordered[max(1, math.ceil(p * len(values))) - 1]
        assert abs(got - true) <= true / 16, (p, got, true)


def test_an_empty_histogram_reports_zeros():
    assert Histogram().percentiles() == (0, 0, 0)


def row(k: int) -> tuple:
    return tuple(range(k, k + NFIELDS))


def test_records_read_back_and_a_torn_tail_ends_the_file():
    data = encode(60_000, b"orders", row(1)) + encode(120_000, b"emails", row(2))
    whole = len(data)
    got, length = decode_file(data + encode(180_000, b"orders", row(3))[:-5])
    assert length == whole
    assert got == [(60_000, b"orders", row(1)), (120_000, b"emails", row(2))]
    damaged = bytearray(data)
    damaged[-3] ^= 0xFF                               # a flipped bit in the second record
    got, length = decode_file(bytes(damaged))
    assert [m for m, _n, _r in got] == [60_000] and length == len(encode(60_000, b"orders", row(1)))


def test_series_keep_minutes_in_order_and_merge_a_minute_seen_twice():
    s = Series()
    s.put(3, row(30))
    s.put(1, row(10))                                 # a clock that went back: still in order
    s.put(2, row(20))
    s.put(3, row(5))
    assert [m for m, _r in s.between(0, 10 * 60_000)] == [60_000, 120_000, 180_000]
    merged = dict(s.between(0, 10 * 60_000))[180_000]
    assert merged == merge(row(30), row(5))
    assert merged[:7] == tuple(a + b for a, b in zip(row(30)[:7], row(5)[:7]))   # counts add
    assert merged[13:] == row(5)[13:]                                            # depth: the later
    assert s.between(120_000, 120_000) == [(120_000, row(20))]                   # both ends included
    s.prune(3)
    assert [m for m, _r in s.between(0, 10 * 60_000)] == [180_000]


def test_nice_tops():
    assert [_nice(v) for v in (0, 0.3, 1, 3, 7, 10, 11, 240, 2600)] == [1, 1, 1, 5, 10, 10, 20, 250, 5000]


def chart(**kw) -> Charts:
    q = QueueChart(name=kw.get("name", "q"), kept=kw.get("kept", 4), pushed=[None, 3, 0, 5], acked=[None, 2, 0, 5],
                   wait95=[None, 120, None, 4000], run95=[None, 10, None, 15], ready=[None, 7, 7, 1],
                   in_flight=[None, 0, 2, 0])
    return Charts("1h", 0, 60_000, 4, [q], more=kw.get("more", 0), off=kw.get("off", False))


def test_a_gap_breaks_the_line_and_a_lone_point_is_a_dot():
    html = render_charts(chart())
    assert html.count("<svg") == 3
    # wait95: points 1 and 3 stand alone between gaps: two dots, no line
    assert html.count('<circle class="c3"') == 2 and html.count('<circle class="c4 second"') == 2
    # pushed: a line from point 1 on (nothing before the first kept minute), acked dashed over it
    assert html.count('<polyline class="c1"') == 2 and html.count('<polyline class="c2 second"') == 1
    assert "wait 4 s" in html and "pushed 5" in html and "in flight 0" in html


def test_names_are_escaped_and_the_states_are_said():
    assert "&lt;i&gt;" in render_charts(chart(name="<i>")) and "<i>" not in render_charts(chart(name="<i>"))
    assert "No minute kept in the last 1 h" in render_charts(chart(kept=0))
    assert "History is off" in render_charts(chart(off=True))
    assert "have the other 3" in render_charts(chart(more=3))
    assert render_charts(None) == ""


def p95_chart(wait_ms: int) -> tuple[str, list[str]]:
    """The wait p95 legend's value and the y ticks (bottom up) of a chart whose one wait is ``wait_ms``."""
    q = QueueChart(name="q", kept=1, pushed=[1], acked=[1], wait95=[wait_ms], run95=[None], ready=[0], in_flight=[0])
    html = render_charts(Charts("1h", 0, 60_000, 1, [q]))
    svg = html[html.index("Wait / run p95</text>"):]
    svg = svg[:svg.index("</svg>")]
    return re.search(r">wait ([^<]+)</text>", svg).group(1), re.findall(r'text-anchor="end">([^<]+)</text>', svg)[:3]


def test_a_legend_and_the_ticks_of_its_chart_say_the_same_unit():
    """One table of units for both: 1.5 s is "1.5 s" in the legend and on the axis, not ticked in ms."""
    assert p95_chart(1500) == ("1.5 s", ["0", "1 s", "2 s"])
    edges = sorted({v for size, least, _name in UNITS for v in (least - 1, least, 2 * least, size) if v > 0})
    for v in edges:
        legend, ticks = p95_chart(v)
        assert legend.split()[-1] == ticks[-1].split()[-1], (v, legend, ticks)


def test_a_promoted_replica_counts_from_its_promotion(tmp_path):
    """What a replica's store replayed raised its counters; once promoted
    (``History.resume``) only its own changes count.  Without the resume the
    first minute would take the replayed pushes as its own."""
    t0 = 1_700_000_040_000 - 1_700_000_040_000 % 60_000
    for promoted in (True, False):
        store = Store()
        q = store.create_queue(b"q", QueueConfig(), t0)
        h = History(str(tmp_path / f"h{promoted}"))
        h.tick(store, t0)                                  # the daemon attached: counters noted
        q.counters.pushed += 5                             # replayed from the primary
        if promoted:
            h.resume(store, t0 + 1000)
        q.counters.pushed += 2                             # its own pushes
        h.tick(store, t0 + 60_000)
        assert [row[0] for _m, row in h.rows(b"q")] == ([2] if promoted else [7])
