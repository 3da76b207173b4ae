"""The history's charts on the status page (its JSON, ``GET
/api/queues/<q>/history``, is daemon/http.py's, from QHISTORY's
``commands.history.minutes``).

Per queue three charts over the last hour, 24 hours or 72 hours (the page's
``?range=1h|24h|72h``, chosen by buttons of a GET form: no script, and the
page still loads nothing): throughput (pushed and acked), the
wait and run p95, and the depth (ready and in flight).  They are drawn as
inline SVG, text and lines only, in the page's own font: nothing is loaded
from anywhere else.

Two steps, as for the rest of the page (daemon/status.py): ``read_charts``
reads the kept minutes into plain numbers on the loop, one bucket a point
(1 minute for 1 h, 5 for 24 h, 15 for 72 h: at most 288 points a line), with
slices and sums over the history's ``array`` columns rather than a Python
step per minute; ``render_charts`` writes the HTML, a pure function run in
the worker thread with the page.  In a bucket of several minutes,
throughput is the sum, a p95 the worst minute's, and the depth the last
minute's.  At most ``MAX_CHART_QUEUES`` queues (by name) are drawn.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from dataclasses import dataclass
from urllib.parse import parse_qs

from leaseq.storage.history import FIELDS, MINUTE, NFIELDS

from .html import esc

RANGES = {"1h": (60, 1), "24h": (1440, 5), "72h": (4320, 15)}     # name -> (minutes shown, minutes a point)
DEFAULT_RANGE = "1h"
MAX_CHART_QUEUES = 20

_F = {name: i for i, name in enumerate(FIELDS)}
PUSHED, CLAIMED, ACKED = _F["pushed"], _F["claimed"], _F["acked"]
WAIT95, RUN95, READY, IN_FLIGHT = _F["wait_p95"], _F["run_p95"], _F["ready"], _F["in_flight"]


# -- the numbers, read on the loop ------------------------------------------------------------------

@dataclass(frozen=True)
class QueueChart:
    name: str
    kept: int               # minutes kept in the range
    pushed: list            # per point; counts are 0 where nothing was kept, None before the first kept minute
    acked: list
    wait95: list            # ms, None where no claim was seen
    run95: list             # ms, None where no ack was seen
    ready: list             # None where no minute was kept
    in_flight: list


@dataclass(frozen=True)
class Charts:
    range: str              # "1h", "24h" or "72h"
    start_ms: int           # the first point's start (daemon clock)
    point_ms: int           # what one point covers
    points: int
    queues: list            # QueueChart, by name
    more: int = 0           # queues not drawn (beyond MAX_CHART_QUEUES)
    off: bool = False       # history-hours is 0


def chosen_range(query: bytes) -> str:
    """The ``range`` of the page's query string; the default when absent or unknown."""
    got = parse_qs(query.decode("ascii", "replace")).get("range", [""])[-1]
    return got if got in RANGES else DEFAULT_RANGE


def read_charts(server, span: str = DEFAULT_RANGE) -> Charts:
    """What the charts draw, read from the history now (on the loop)."""
    history = server.history
    minutes, per = RANGES[span]
    end = server.now_ms() // MINUTE            # the open minute: not closed yet, not drawn
    start = end - minutes
    points = minutes // per
    names = sorted(set(server.store.queues) | set(history.series))
    queues = [_queue_chart(name, history.series.get(name), start, per, points) for name in names[:MAX_CHART_QUEUES]]
    return Charts(span, start * MINUTE, per * MINUTE, points, queues, max(0, len(names) - MAX_CHART_QUEUES),
                  off=not history.on)


def _queue_chart(name: bytes, series, start: int, per: int, points: int) -> QueueChart:
    label = name.decode(errors="replace")
    if series is None:
        return QueueChart(label, 0, [0] * points, [0] * points, [None] * points, [None] * points,
                          [None] * points, [None] * points)
    ms, rows = series.minutes, series.rows
    i0 = bisect_left(ms, start)
    i1 = bisect_left(ms, start + per * points)
    cuts = [bisect_left(ms, start + k * per, i0, i1) - i0 for k in range(points + 1)]

    def col(f):
        return rows[i0 * NFIELDS + f:i1 * NFIELDS:NFIELDS]

    pushed, claimed, acked = col(PUSHED), col(CLAIMED), col(ACKED)
    wait, run, ready, flight = col(WAIT95), col(RUN95), col(READY), col(IN_FLIGHT)
    out = ([], [], [], [], [], [])
    first = ms[0] if len(ms) else start + per * points    # before it nothing was kept: no line, not 0
    for k in range(points):
        a, b = cuts[k], cuts[k + 1]
        if a == b:
            none = start + (k + 1) * per <= first
            out[0].append(None if none else 0)
            out[1].append(None if none else 0)
            out[2].append(None)
            out[3].append(None)
            out[4].append(None)
            out[5].append(None)
            continue
        out[0].append(sum(pushed[a:b]))
        out[1].append(sum(acked[a:b]))
        out[2].append(max(wait[a:b]) if any(claimed[a:b]) else None)
        out[3].append(max(run[a:b]) if any(acked[a:b]) else None)
        out[4].append(ready[b - 1])
        out[5].append(flight[b - 1])
    return QueueChart(label, i1 - i0, *out)


# -- HTML -------------------------------------------------------------------------------------------

CSS = """
form.ranges { display: flex; gap: 6px; margin: 0 0 6px; font-size: 12px; }
.ranges button, .ranges b { font: inherit; padding: 0 8px; border: 1px solid var(--line); border-radius: 5px;
                            font-weight: 400; line-height: 1.5; }
.ranges b { background: var(--fg); color: #fff; border-color: var(--fg); }
.ranges button { background: #fff; color: var(--fg); cursor: pointer; }
.ranges button:hover { background: var(--band); }
.chartrow { margin: 0 0 8px; padding: 4px 0 6px; border-bottom: 1px solid var(--line); }
.chartrow h3 { margin: 2px 0 4px; overflow-wrap: anywhere; }
.chartrow .charts { display: flex; flex-wrap: wrap; gap: 4px 24px; }
.chartrow .empty { color: var(--muted); margin: 2px 0; font-size: 13px; }
figure.chart { margin: 0; }
figure.chart svg { display: block; font: 11px system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif; }
svg .axis { stroke: var(--line); }
svg .grid { stroke: #eef1f4; }
svg .tick { fill: var(--muted); }
svg .title { fill: var(--fg); font-weight: 600; }
svg polyline { fill: none; stroke-width: 1.6; stroke-linejoin: round; }
svg polyline.second { stroke-dasharray: 4 2; }
.c1 { stroke: #0969da; } .c2 { stroke: #1a7f37; } .c3 { stroke: #bc4c00; } .c4 { stroke: #8250df; }
rect.c1, circle.c1 { fill: #0969da; } rect.c2, circle.c2 { fill: #1a7f37; }
rect.c3, circle.c3 { fill: #bc4c00; } rect.c4, circle.c4 { fill: #8250df; }
"""

W, H = 360, 150                       # one chart, px
LEFT, RIGHT, TOP, BOTTOM = 56, 8, 34, 20


def render_charts(charts: Charts | None) -> str:
    """The history section: its title, the range buttons, then a row of charts per queue."""
    if charts is None:
        return ""
    links = "".join(f"<b>{esc(r)}</b>" if r == charts.range else
                    f'<button name="range" value="{r}" title="History over the last {r[:-1]} h">{esc(r)}</button>'
                    for r in RANGES)
    per = charts.point_ms // MINUTE
    title = (f'<h2 id="history">History, last {charts.range[:-1]} h'
             f'<span class="count">{"per minute" if per == 1 else f"a point per {per} minutes"}; '
             f'times UTC on the daemon clock</span></h2>'
             f'<form class="ranges" method="get" action="/">{links}</form>')
    if charts.off:
        return title + '<p class="note">History is off (history-hours 0).</p>'
    if not charts.queues:
        return title + '<p class="note">No queues yet.</p>'
    rows = "".join(_chart_row(q, charts) for q in charts.queues)
    note = (f'<p class="note">Charts of the first {len(charts.queues)} queues by name; QHISTORY and '
            f'/api/queues/&lt;queue&gt;/history have the other {charts.more:,}.</p>' if charts.more else "")
    return title + rows + note


def _chart_row(q: QueueChart, charts: Charts) -> str:
    head = f"<h3>{esc(q.name)}</h3>"
    if not q.kept:
        return (f'<div class="chartrow">{head}<p class="empty">No minute kept in the last {charts.range[:-1]} h '
                "yet: a minute is kept once it ends.</p></div>")
    per = charts.point_ms // MINUTE
    unit = "minute" if per == 1 else f"{per} min"
    return (f'<div class="chartrow">{head}<div class="charts">'
            + _chart(f"Throughput per {unit}", charts, ((q.pushed, "pushed", "c1"), (q.acked, "acked", "c2")), _count)
            + _chart("Wait / run p95", charts, ((q.wait95, "wait", "c3"), (q.run95, "run", "c4")), _ms)
            + _chart("Depth", charts, ((q.ready, "ready", "c1"), (q.in_flight, "in flight", "c3")), _count)
            + "</div></div>")


def _chart(title: str, charts: Charts, lines, fmt) -> str:
    most = max((v for values, _n, _c in lines for v in values if v is not None), default=0)
    tick = fmt
    if fmt is _ms:                                 # a round top, and every label, in the legend's unit
        unit, unit_name = ms_unit(most)
        top = _nice(most / unit) * unit

        def tick(v):
            return f"{v / unit:.3g} {unit_name}" if v else "0"
    else:
        top = _nice(most)
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM
    n = charts.points
    parts = [f'<figure class="chart"><svg width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img">',
             f"<title>{esc(title)}: {esc(_summary(lines, fmt))}</title>",
             f'<text class="title" x="{LEFT}" y="11">{esc(title)}</text>']
    x = LEFT
    for values, name, css in lines:                # the legend, under the title: each line's latest value
        label = f"{name} {fmt(_last(values))}"
        parts.append(f'<rect class="{css}" x="{x}" y="18" width="9" height="9" rx="2"/>'
                     f'<text class="tick" x="{x + 12}" y="26">{esc(label)}</text>')
        x += 7 * len(label) + 26
    for frac in (0, 0.5, 1):
        y = TOP + ph - frac * ph
        parts.append(f'<line class="{"axis" if frac == 0 else "grid"}" x1="{LEFT}" x2="{W - RIGHT}" '
                     f'y1="{y:.1f}" y2="{y:.1f}"/>'
                     f'<text class="tick" x="{LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">{esc(tick(top * frac))}'
                     "</text>")
    for frac, anchor in ((0, "start"), (0.5, "middle"), (1, "end")):
        at = charts.start_ms + frac * n * charts.point_ms
        parts.append(f'<text class="tick" x="{LEFT + frac * pw:.1f}" y="{H - 5}" text-anchor="{anchor}">'
                     f"{esc(_clock(at, charts.range))}</text>")
    step = pw / max(1, n - 1) if n > 1 else 0
    for i, (values, _name, css) in enumerate(lines):
        css = f"{css} second" if i else css         # the second line dashed: it may lie on the first
        run: list = []
        for k, v in enumerate(values):
            if v is None:
                parts.append(_polyline(run, css))
                run = []
                continue
            run.append(f"{LEFT + k * step:.0f},{TOP + ph - (v / top) * ph:.0f}")
        parts.append(_polyline(run, css))
    parts.append("</svg></figure>")
    return "".join(parts)


def _polyline(points: list, css: str) -> str:
    if not points:
        return ""
    if len(points) == 1:
        x, y = points[0].split(",")
        return f'<circle class="{css}" cx="{x}" cy="{y}" r="1.8"/>'
    return f'<polyline class="{css}" points="{" ".join(points)}"/>'


def _last(values):
    for v in reversed(values):
        if v is not None:
            return v
    return None


def _summary(lines, fmt) -> str:
    return "; ".join(f"{name}: last {fmt(_last(values))}, most {fmt(max((v for v in values if v is not None), default=None))}"
                     for values, name, _c in lines)


def _nice(v: float) -> float:
    """The smallest of 1, 2, 2.5, 5 x 10^k (k >= 0) at or above ``v``: a
    chart's top (its values are whole counts and ms)."""
    scale = 1
    while scale * 10 < v:
        scale *= 10
    for m in (1, 2, 2.5, 5, 10):
        if m * scale >= v:
            return m * scale
    return 10 * scale


def _count(v) -> str:
    if v is None:
        return "–"
    if v >= 1_000_000:
        return f"{v / 1_000_000:.3g}M"
    if v >= 1000:
        return f"{v / 1000:.3g}k"
    return f"{v:.3g}" if v != int(v) else str(int(v))


# The units of a time in ms, largest first: (ms in the unit, the least value
# shown in it, its name).  Seconds from 1 s; minutes and hours only from two
# of them ("90 s" reads better than "1.5 min").
UNITS = ((3_600_000, 7_200_000, "h"), (60_000, 120_000, "min"), (1000, 1000, "s"), (1, 0, "ms"))


def ms_unit(v: float) -> tuple[int, str]:
    """(ms in it, name) of the unit ``v`` ms is shown in: a legend's value,
    and every tick of a chart whose highest value is ``v``."""
    return next(((size, name) for size, least, name in UNITS if v >= least), (1, "ms"))


def _ms(v) -> str:
    if v is None:
        return "–"
    size, name = ms_unit(v)
    return f"{int(v)} ms" if size == 1 else f"{v / size:.3g} {name}"


def _clock(ms: float, span: str) -> str:
    t = time.gmtime(ms / 1000)
    return time.strftime("%H:%M" if span == "1h" else "%a %H:%M", t)

