"""The status page, ``GET /`` on the HTTP listener (docs/operations.md,
"Status page"): queues with their counts, rates, oldest ready job and flow
control (limits, pauses, groups, throttled jobs), the schedules, the latest
dead letters with their errors, the jobs in flight with their progress, the
next ready jobs, and the log and snapshots, in one HTML page that refreshes
itself and loads nothing from anywhere else.  Its buttons are forms that
POST the actions of ``daemon.actions`` (pause, resume, retry, delete,
cancel), each carrying the viewer's CSRF token; each queue's Search button
opens its search and bulk actions (``daemon.search``).

Three parts, so that the page can be tested without a socket:

* ``RateSamples`` keeps the pushed and acked counters of every queue, sampled
  once a second for the last few seconds.  A rate is then the counters' rise
  since the oldest sample over the time since it: a window that does not
  depend on how often anyone looks, at the cost of one small dict a second
  while the HTTP listener is on, and nothing per command.
* ``read_status(server, rates)`` reads the live state into plain data
  (``Status``), on the loop.  The header and the log and snapshot figures
  are INFO's own sections (``Server.info_sections``); queue counts come from
  ``Indexes.counts`` as INFO's and /metrics' do.  Everything it reads is
  bounded: at most ``MAX_QUEUES`` queues, ``DEAD_PER_QUEUE`` dead letters
  each, error texts cut to ``MAX_ERROR_BYTES``.
* ``render(status)`` turns that data into HTML text: a pure function, run in
  a worker thread like /metrics' formatting.  Every text that comes from
  outside (queue names, errors, paths, settings) goes through ``esc``
  (``daemon/html.py``, which holds what the pages share).

Nothing is folded before it is read (folding would log EXPIRE records): the
counts are the queues' as they stand, the same as INFO's.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from itertools import islice

from leaseq.storage import flow, queries
from leaseq.storage.job import DEAD, IN_FLIGHT, Job
from leaseq.storage.queue import Queue

from .charts import CSS as CHARTS_CSS
from .charts import DEFAULT_RANGE, render_charts
from .html import VIEWPORT, ago, cut, document, duration, esc, header, text

REFRESH_SECONDS = 2
JOBS_PER_QUEUE = 5          # jobs in flight, and next ready, listed per queue
MAX_QUEUES = 500            # rows in the queue table; the rest is counted in a note
DEAD_PER_QUEUE = 5          # latest dead letters listed per queue
DEAD_LOOK_AT = 50           # newest jobs of a dead-letter queue looked at for provenance
MAX_ERROR_BYTES = 300       # of an error text (a client may send megabytes)
RATE_SAMPLES = 6            # one a second: rates over the last 5 to 6 seconds
MIN_RATE_SPAN = 0.5         # seconds: a shorter span gives no rate yet


# -- rates --------------------------------------------------------------------------------------

class RateSamples:
    """A ring of ``(monotonic seconds, {queue name: (pushed, acked)})``."""

    def __init__(self, keep: int = RATE_SAMPLES) -> None:
        self.ring: deque = deque(maxlen=keep)

    def sample(self, queues, moment: float) -> None:
        self.ring.append((moment, {q.name: (q.counters.pushed, q.counters.acked) for q in queues}))

    def rates(self, q: Queue, moment: float) -> tuple[float, float]:
        """Pushes and acks per second of ``q`` since the oldest sample that
        holds it.  A queue dropped and made again starts its counters over:
        a fall counts as no rate, not a negative one."""
        for when, counters in self.ring:
            then = counters.get(q.name)
            span = moment - when
            if then is not None and span >= MIN_RATE_SPAN:
                pushed, acked = then
                c = q.counters
                return max(0.0, (c.pushed - pushed) / span), max(0.0, (c.acked - acked) / span)
        return 0.0, 0.0


# -- the live state as plain data -----------------------------------------------------------------

@dataclass(frozen=True)
class QueueRow:
    name: str
    durability: str
    counts: dict            # state -> jobs, as Indexes.counts
    push_rate: float        # per second
    ack_rate: float
    oldest_ready_ms: int    # 0 when nothing is ready
    flow: str = ""          # its limits, pauses, groups and throttled jobs, in a few words ("" when none)
    paused: bool = False
    dead_letters: bool = False  # it holds dead letters (dead jobs, or arrivals of a dead-letter queue)


@dataclass(frozen=True)
class JobRow:
    """A job in flight (with its lease and progress) or ready (next in claim order)."""
    queue: str
    id: int
    priority: int
    deliveries: int
    age_ms: int             # since enqueued
    consumer: str = ""      # in flight: who holds it
    lease_left_ms: int = 0
    progress: str = ""      # QPROGRESS, cut to MAX_ERROR_BYTES


@dataclass(frozen=True)
class ScheduleRow:
    queue: str
    name: str
    spec: str               # CRON expr [TZ zone] or EVERY ms
    next_ms: int            # daemon-clock ms epoch
    last_ms: int            # 0: no tick pushed yet
    fired: int
    skipped: int


@dataclass(frozen=True)
class DeadLetter:
    queue: str              # where it is now
    id: int
    state: str
    source: str             # the queue it was dead-lettered from; "" when it died where it is
    source_id: int
    reason: str             # max-deliveries, nack or expired
    deliveries: int         # before it died
    last_error: str         # cut to MAX_ERROR_BYTES


@dataclass(frozen=True)
class Status:
    now: float              # unix seconds when it was read
    info: dict              # INFO's sections but queues: {section: {field: value}}
    queues: list            # QueueRow, by name, at most MAX_QUEUES
    queue_count: int        # all queues
    dead_letters: list      # DeadLetter, by queue name, newest first within a queue
    schedules: list = ()    # ScheduleRow of the queues shown, by queue and name
    now_ms: int = 0         # the daemon's clock (schedules are on it)
    in_flight: list = ()    # JobRow, the first JOBS_PER_QUEUE by lease deadline of each queue shown
    ready: list = ()        # JobRow, the next JOBS_PER_QUEUE in claim order of each queue shown
    user: str = "default"   # who is looking (daemon.actions)
    csrf: str = ""          # the token the page's forms carry
    read_only: bool = False  # a replica: its buttons are shown disabled (changes go to the primary)
    notice: str = ""        # what the last action did (the ?done= of its 303)
    charts: object = None   # the history's charts (daemon.charts.Charts), read beside this


def read_status(server, rates: RateSamples, user: str = "default", csrf: str = "", notice: str = "") -> Status:
    """What the page shows, read from the daemon now (on the loop)."""
    sections = server.info_sections()
    info = {name: dict(fields) for name, fields in sections.items() if name != "queues"}
    queues = sorted(server.store.queues.values(), key=lambda q: q.name)
    shown = queues[:MAX_QUEUES]
    now_ms = server.now_ms()
    moment = time.monotonic()
    targets = {q.config.deadletter.encode() for q in queues if q.config.deadletter}
    return Status(now=time.time(), info=info,
                  queues=[queue_row(q, rates, now_ms, moment, q.name in targets) for q in shown],
                  queue_count=len(queues),
                  dead_letters=[d for q in shown for d in latest_dead_letters(q, q.name in targets)],
                  schedules=[schedule_row(q, s) for q in shown
                             for s in sorted(q.schedules.values(), key=lambda s: s.name)],
                  now_ms=now_ms,
                  in_flight=[r for q in shown for r in jobs_in_flight(q, now_ms)],
                  ready=[_job_row(q, job, now_ms) for q in shown for job in q.ready_head(JOBS_PER_QUEUE)],
                  user=user, csrf=csrf, notice=notice, read_only=server.read_only)


def jobs_in_flight(q: Queue, now_ms: int) -> list[JobRow]:
    """The first ``JOBS_PER_QUEUE`` jobs in flight, by lease deadline."""
    jobs = q.jobs
    return [_job_row(q, jobs[jid], now_ms) for _, jid in islice(q.indexes.leases, JOBS_PER_QUEUE)]


def _job_row(q: Queue, job: Job, now_ms: int) -> JobRow:
    return JobRow(queue=text(q.name), id=job.id, priority=job.priority, deliveries=job.deliveries,
                  age_ms=max(0, now_ms - job.enqueued_at), consumer=text(job.consumer or b""),
                  lease_left_ms=max(0, job.deadline - now_ms) if job.state is IN_FLIGHT else 0,
                  progress=cut(job.progress, MAX_ERROR_BYTES))


def queue_row(q: Queue, rates: RateSamples, now_ms: int, moment: float, is_target: bool = False) -> QueueRow:
    push_rate, ack_rate = rates.rates(q, moment)
    counts = q.indexes.counts()
    return QueueRow(name=text(q.name), durability=q.config.durability, counts=counts,
                    push_rate=push_rate, ack_rate=ack_rate, oldest_ready_ms=queries.oldest_ready_age(q, now_ms),
                    flow=flow_summary(q, now_ms), paused=q.config.paused,
                    dead_letters=bool(counts["dead"] or (is_target and counts["ready"])))


def flow_summary(q: Queue, now_ms: int) -> str:
    """A queue's flow control in a few words, what holds jobs back first:
    "paused · rate 10 / 1 s · ≤ 4 in flight · per group ≤ 1, 5 / 1 s ·
    1,204 groups, 2 paused · 37 throttled"; "" for a queue that sets none."""
    c = q.config
    if not flow.limited(q) and q.indexes.groups is None:
        return ""
    words = []
    if c.paused:
        words.append("paused")
    if c.rate[0]:
        words.append(f"rate {c.rate[0]:,} / {duration(c.rate[1])}")
    if c.concurrency:
        words.append(f"≤ {c.concurrency:,} in flight")
    per_group = ([f"≤ {c.group_concurrency:,}"] if c.group_concurrency else []) + (
        [f"{c.group_rate[0]:,} / {duration(c.group_rate[1])}"] if c.group_rate[0] else [])
    if per_group:
        words.append("per group " + ", ".join(per_group))
    if q.indexes.groups is not None:
        groups = f"{queries.group_count(q):,} groups"
        words.append(groups + (f", {len(c.paused_groups):,} paused" if c.paused_groups else ""))
    elif c.paused_groups:
        words.append(f"{len(c.paused_groups):,} groups paused")
    held = flow.throttled(q, now_ms)
    if held:
        words.append(f"{held:,} throttled")
    return " · ".join(words)


def schedule_row(q: Queue, s) -> ScheduleRow:
    return ScheduleRow(queue=text(q.name), name=text(s.name), spec=s.spec, next_ms=s.next, last_ms=s.last,
                       fired=s.fired, skipped=s.skipped)


def latest_dead_letters(q: Queue, is_target: bool) -> list[DeadLetter]:
    """Up to ``DEAD_PER_QUEUE`` of ``q``: jobs that died in it, then, when
    some queue names it as DEADLETTER, jobs that arrived in it as dead
    letters.  Only dead-letter queues are looked through for arrivals, so a
    page costs nothing for the queues that are not."""
    rows = [_buried(q, job) for job in queries.latest_buried(q, DEAD_PER_QUEUE)]
    if is_target and len(rows) < DEAD_PER_QUEUE:
        arrived = queries.latest_dead_lettered(q, DEAD_PER_QUEUE, DEAD_LOOK_AT)
        rows += [_arrived(q, job) for job in arrived if job.state is not DEAD]
    return rows[:DEAD_PER_QUEUE]


def _buried(q: Queue, job: Job) -> DeadLetter:
    return DeadLetter(queue=text(q.name), id=job.id, state=text(job.state), source="", source_id=0,
                      reason=text(job.dead_reason or b""), deliveries=job.deliveries,
                      last_error=cut(job.last_error, MAX_ERROR_BYTES))


def _arrived(q: Queue, job: Job) -> DeadLetter:
    o = job.origin
    return DeadLetter(queue=text(q.name), id=job.id, state=text(job.state), source=text(o.source),
                      source_id=o.src_id, reason=text(o.reason), deliveries=o.deliveries,
                      last_error=cut(job.last_error, MAX_ERROR_BYTES))


# -- HTML -----------------------------------------------------------------------------------------

def render(status: Status) -> str:
    """The whole page; ``status`` is all it reads (the clock included)."""
    state, css_class, alert = _state(status.info)
    refresh = f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}; url={_refresh_url(status)}">'
    return document(state, CHARTS_CSS if status.charts else "", "".join([
        _header(status, state, css_class),
        f'<p class="alert {css_class}">{esc(alert)}</p>' if alert else "",
        f'<p class="alert ok" id="notice">{esc(status.notice)}</p>' if status.notice else "",
        "<main>", _queues_and_dead_letters(status, state), _history_charts(status, state), _log_and_snapshots(status),
        "</main>",
        _footer(status),
    ]), head=refresh + VIEWPORT)


def _refresh_url(status: Status) -> str:
    """Where the page reloads itself: the same range of the charts."""
    charts = status.charts
    return "/" if charts is None or charts.range == DEFAULT_RANGE else f"/?range={charts.range}"


def _history_charts(status: Status, state: str) -> str:
    return "" if state == "loading" else render_charts(status.charts)


def refusal_page(sentence: str) -> str:
    """What a browser shows for a refused action or a page it may not see:
    the sentence, and the way back."""
    return document("refused", "", header("refused", "bad") + f'<p class="alert bad" id="refusal">{esc(sentence)}</p>'
                    '<main><p><a href="/">Back to the status page</a> (nothing was changed)</p></main>', head="")


def _state(info: dict) -> tuple[str, str, str]:
    """(state word, its CSS class, a sentence when it is not plain ready)."""
    p = info["persistence"]
    if p.get("loading"):
        seconds = p.get("loading_elapsed_ms", 0) / 1000
        return "loading", "warn", f"Recovering the data directory ({seconds:.1f} s so far): commands get -LOADING."
    if p.get("log_write_status") == "err":
        return ("disk error", "bad", f"The log cannot be written: {p.get('log_write_error')}. Commands that "
                "change queues get -MISCONF until the disk takes writes again; reads go on.")
    r = info.get("replication", {})
    if "shutdown_in_milliseconds" in info["server"]:
        return ("stopping", "warn", "Shutting down once every replica has all this node wrote "
                f"({info['server']['shutdown_in_milliseconds'] / 1000:.1f} s at most): commands that change "
                "queues wait meanwhile, reads go on.")
    failover = r.get("master_failover_state", "no-failover")
    if failover != "no-failover":
        return ("failing over", "warn", f"Handing the primary's role to a replica (FAILOVER, {failover}): "
                "commands that change queues wait, then are refused with -READONLY and go to the new primary.")
    if r.get("role") == "slave":
        primary = f"{r['master_host']}:{r['master_port']}"
        if r.get("master_link_status") != "up":
            return ("replica, link down", "warn", f"A replica of {primary}, whose link has been down for "
                    f"{r.get('master_link_down_since_seconds', 0)} s: reads show what it had then; commands that "
                    "change queues get -READONLY (send them to the primary).")
        return ("replica", "ok", f"A replica of {primary}: it answers reads; commands that change queues get "
                "-READONLY (send them to the primary).")
    return "ready", "ok", ""


def _role(r: dict) -> str:
    """The header's word on replication (INFO's replication section)."""
    if r.get("role") == "slave":
        return f"replica of {r['master_host']}:{r['master_port']}, link {r.get('master_link_status')}"
    n = r.get("connected_slaves", 0)
    return f"primary, {n} replica{'s' if n != 1 else ''}" if n else "primary"


def _header(status: Status, state: str, css_class: str) -> str:
    server, clients, memory, stats = (status.info[s] for s in ("server", "clients", "memory", "stats"))
    facts = [
        ("version", server["leaseq_version"]),
        ("up", duration(server["uptime_in_seconds"] * 1000)),
        ("clients", f"{clients['connected_clients']:,}"
                    + (f" ({clients['blocked_clients']:,} blocked)" if clients["blocked_clients"] else "")),
        ("ops/s", f"{stats['instantaneous_ops_per_sec']:,}"),
        ("jobs live", f"{memory['jobs_live']:,}"),
        ("memory", _bytes(memory["used_memory_rss"])),
        ("role", _role(status.info.get("replication", {}))),
        ("port", server["tcp_port"]),
        ("pid", server["process_id"]),
        ("user", status.user),
    ]
    return header(state, css_class, facts)


QUEUE_COLUMNS = ("ready", "delayed", "waiting", "in_flight", "dead", "completed", "cancelled")


def _queues_and_dead_letters(status: Status, state: str) -> str:
    if state == "loading":          # the server holds an empty stand-in until recovery is done
        return '<h2>Queues</h2><p class="note">Listed once the data directory is recovered.</p>'
    return (_queue_table(status) + _schedule_table(status) + _dead_letter_table(status)
            + _in_flight_table(status) + _ready_table(status))


def _queue_table(status: Status) -> str:
    title = f'<h2>Queues<span class="count">{status.queue_count:,}</span></h2>'
    if not status.queues:
        return title + '<p class="note">No queues yet.</p>'
    head = "".join(f'<th class="n">{esc(c.replace("_", " "))}</th>' for c in QUEUE_COLUMNS)
    note = ""
    if status.queue_count > len(status.queues):
        note = (f'<p class="note">The first {len(status.queues):,} of {status.queue_count:,} queues by name; '
                "INFO and /metrics list them all.</p>")
    rows = "".join(_queue_tr(row, status) for row in status.queues)
    return (f'{title}<table><thead><tr><th>queue</th><th>durability</th>{head}<th class="n">push/s</th>'
            f'<th class="n">ack/s</th><th class="n">oldest ready</th><th>flow control</th><th>actions</th>'
            f"</tr></thead><tbody>{rows}</tbody></table>{note}")


def _queue_tr(row: QueueRow, status: Status) -> str:
    cells = "".join(_count_td(row.counts[c], c) for c in QUEUE_COLUMNS)
    oldest = duration(row.oldest_ready_ms) if row.oldest_ready_ms else "–"
    acts = (_form("resume", "Resume", row.name, status) if row.paused
            else _form("pause", "Pause", row.name, status))
    if row.dead_letters:
        acts += (_form("redrive", "Retry dead", row.name, status)
                 + _form("purge-dead", "Delete dead", row.name, status, danger=True))
    acts += _search_link(row.name)
    return (f'<tr><td class="name mono">{esc(row.name)}</td><td class="durability">{esc(row.durability)}</td>'
            f"{cells}{_rate_td(row.push_rate)}{_rate_td(row.ack_rate)}"
            f'<td class="n{"" if row.oldest_ready_ms else " zero"}">{esc(oldest)}</td>'
            f'<td class="flow{" held" if "throttled" in row.flow or "paused" in row.flow else ""}">'
            f'{esc(row.flow) or "–"}</td><td class="acts">{acts}</td></tr>')


def _search_link(queue: str) -> str:
    """The way to the queue's search and bulk actions (daemon/search.py):
    a GET form, so that the page links to nothing but its own server."""
    return (f'<form class="act" method="get" action="/search"><input type="hidden" name="queue" value="{esc(queue)}">'
            f'<button type="submit" title="{esc("Search: " + queue)}">Search</button></form>')


def _form(action: str, label: str, queue: str, status: Status, jid: int | None = None, danger: bool = False) -> str:
    """One button: a form that POSTs ``action`` (daemon.actions) for ``queue``
    (and job ``jid``); disabled on a replica, which refuses changes."""
    job = "" if jid is None else f'<input type="hidden" name="id" value="{jid}">'
    what = f"job {jid} of {queue}" if jid is not None else queue
    title = (f"{label}: {what}" if not status.read_only
             else f"{label}: {what} (a replica refuses changes: use the primary's page)")
    return (f'<form class="act" method="post" action="/action/{action}">'
            f'<input type="hidden" name="queue" value="{esc(queue)}">{job}'
            f'<input type="hidden" name="csrf" value="{esc(status.csrf)}">'
            f'<button type="submit" name="do" value="{action}"{" class=danger" if danger else ""}'
            f'{" disabled" if status.read_only else ""} title="{esc(title)}">{esc(label)}</button></form>')


def _in_flight_table(status: Status) -> str:
    return _job_table(
        f'In flight<span class="count">the first {JOBS_PER_QUEUE} per queue by lease deadline</span>',
        '<th class="n">job</th><th>consumer</th><th class="n">deliveries</th><th class="n">lease left</th>'
        "<th>progress</th>",
        [(r, f'<td class="n">{r.id}</td><td class="mono">{esc(r.consumer)}</td><td class="n">{r.deliveries}</td>'
             f'<td class="n">{esc(duration(r.lease_left_ms))}</td>'
             f'<td class="progress mono">{esc(r.progress) or "–"}</td>',
          _form("cancel", "Cancel", r.queue, status, r.id, danger=True)) for r in status.in_flight])


def _ready_table(status: Status) -> str:
    return _job_table(
        f'Next ready<span class="count">the next {JOBS_PER_QUEUE} per queue in claim order</span>',
        '<th class="n">job</th><th class="n">priority</th><th class="n">deliveries</th><th class="n">age</th>',
        [(r, f'<td class="n">{r.id}</td><td class="n">{r.priority}</td><td class="n">{r.deliveries}</td>'
             f'<td class="n">{esc(duration(r.age_ms))}</td>',
          _form("delete", "Delete", r.queue, status, r.id, danger=True)) for r in status.ready])


def _job_table(title: str, heads: str, rows: list) -> str:
    """A table of jobs: the queue, ``heads``' columns, then the actions;
    ``rows`` are (JobRow, its cells, its buttons)."""
    if not rows:
        return f'<h2>{title}</h2><p class="note">None.</p>'
    body = "".join(f'<tr><td class="name mono">{esc(r.queue)}</td>{cells}<td class="acts">{acts}</td></tr>'
                   for r, cells, acts in rows)
    return (f"<h2>{title}</h2><table><thead><tr><th>queue</th>{heads}<th>actions</th></tr></thead>"
            f"<tbody>{body}</tbody></table>")


def _schedule_table(status: Status) -> str:
    if not status.schedules:
        return ""
    rows = "".join(
        f'<tr><td class="name mono">{esc(r.queue)}</td><td class="mono">{esc(r.name)}</td>'
        f'<td class="mono">{esc(r.spec)}</td><td class="n">in {esc(duration(max(0, r.next_ms - status.now_ms)))}</td>'
        f'<td class="n{"" if r.last_ms else " zero"}">'
        f'{esc(duration(max(0, status.now_ms - r.last_ms)) + " ago") if r.last_ms else "–"}</td>'
        f'<td class="n{"" if r.fired else " zero"}">{r.fired:,}</td>'
        f'<td class="n{"" if r.skipped else " zero"}">{r.skipped:,}</td></tr>'
        for r in status.schedules)
    return (f'<h2>Schedules<span class="count">{len(status.schedules):,}</span></h2><table><thead><tr>'
            f'<th>queue</th><th>schedule</th><th>when</th><th class="n">next</th><th class="n">last</th>'
            f'<th class="n">fired</th><th class="n">skipped</th></tr></thead><tbody>{rows}</tbody></table>')


def _count_td(n: int, state: str) -> str:
    emphasis = " zero" if n == 0 else " dead" if state == "dead" else ""
    return f'<td class="n{emphasis}">{n:,}</td>'


def _rate_td(rate: float) -> str:
    if rate == 0:
        return '<td class="n zero">0</td>'
    text = "&lt;0.1" if rate < 0.05 else f"{rate:,.0f}" if rate >= 100 else f"{rate:.1f}"
    return f'<td class="n">{text}</td>'


def _dead_letter_table(status: Status) -> str:
    title = f'<h2>Dead letters<span class="count">the latest {DEAD_PER_QUEUE} per queue</span></h2>'
    if not status.dead_letters:
        return title + '<p class="note">None.</p>'
    rows = "".join(_dead_tr(d, status) for d in status.dead_letters)
    return (f'{title}<table><thead><tr><th>queue</th><th class="n">job</th><th>state</th><th>from</th>'
            f'<th>reason</th><th class="n">deliveries</th><th>last error</th><th>actions</th></tr></thead>'
            f"<tbody>{rows}</tbody></table>")


def _dead_tr(d: DeadLetter, status: Status) -> str:
    source = f"{esc(d.source)} #{d.source_id}" if d.source else "–"
    acts = (_form("redrive", "Retry", d.queue, status, d.id)
            + _form("delete", "Delete", d.queue, status, d.id, danger=True))
    return (f'<tr><td class="name mono">{esc(d.queue)}</td><td class="n">{d.id}</td><td>{esc(d.state)}</td>'
            f'<td class="mono">{source}</td><td>{esc(d.reason)}</td><td class="n">{d.deliveries}</td>'
            f'<td class="error mono">{esc(d.last_error) or "–"}</td><td class="acts">{acts}</td></tr>')


def _log_and_snapshots(status: Status) -> str:
    p = status.info["persistence"]
    if p.get("loading"):
        return ('<h2>Log &amp; snapshots</h2>'
                + _pairs("Recovering", [("directory", p.get("dir", "")),
                                        ("for", duration(p.get("loading_elapsed_ms", 0)))]))
    return ('<h2>Log &amp; snapshots</h2><div class="columns">'
            + _pairs("Log", _log_pairs(p, status.now))
            + _pairs("Snapshots", _snapshot_pairs(p, status.now))
            + _pairs("Recovery at start", _recovery_pairs(p))
            + "</div>")


def _pairs(title: str, pairs: list) -> str:
    body = "".join(f"<dt>{esc(name)}</dt><dd>{esc(value)}</dd>" for name, value in pairs)
    return f"<section><h3>{esc(title)}</h3><dl>{body}</dl></section>"


def _log_pairs(p: dict, now: float) -> list:
    writable = "yes" if p.get("log_write_status") == "ok" else f"no: {p.get('log_write_error')}"
    segments = (f"{p['wal_segments']:,}, writing #{p['wal_current_segment']}" if "wal_segments" in p
                else "– (reopened when the disk takes writes again)")
    return [
        ("writable", writable),
        ("directory", p.get("dir", "")),
        ("segments", segments),
        ("size", _bytes(p["wal_bytes"]) if "wal_bytes" in p else "–"),
        ("last fsync", _last_fsync(p, now)),
        ("fsyncs", f"{p.get('fsyncs', 0):,}"),
        ("durability", f"{p.get('default_durability')} by default, leases {p.get('lease_durability')}"),
    ]


def _last_fsync(p: dict, now: float) -> str:
    when = p.get("last_fsync_time_ms", 0)
    if not when:
        return "none yet"
    took = p.get("last_fsync_duration_ms")
    return ago(when / 1000, now) + ("" if took is None else f", took {took} ms")


def _snapshot_pairs(p: dict, now: float) -> list:
    last = p.get("last_snapshot_time", 0)
    status = p.get("last_snapshot_status", "")
    if last:
        done = f"{ago(last, now)}, {status}"
        if p.get("last_snapshot_duration_ms", -1) >= 0:
            done += f" in {duration(p['last_snapshot_duration_ms'])}"
    else:
        done = "none yet" if status == "ok" else f"none yet, last attempt {status}"
    return [
        ("last", done),
        ("size", _bytes(p.get("last_snapshot_bytes", 0)) if last else "–"),
        ("in progress", "yes" if p.get("snapshot_in_progress") else "no"),
        ("taken since start", f"{p.get('snapshots_taken', 0):,}"),
        ("log since the last", _bytes(p.get("log_bytes_since_snapshot", 0))),
        ("next after", f"{_bytes(p.get('snapshot_min_bytes', 0))} of log and twice the live data"),
        ("archive", p.get("archive_dir") or "none: compaction deletes"),
    ]


def _recovery_pairs(p: dict) -> list:
    return [
        ("from snapshot", p.get("recovery_snapshot", "–")),
        ("records replayed", f"{p.get('recovery_records', 0):,}"),
        ("took", f"{p.get('recovery_seconds', '0')} s"),
        ("boot epoch", p.get("boot_epoch", "–")),
    ]


def _footer(status: Status) -> str:
    moment = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(status.now))
    return (f"<footer>Read at {esc(moment)}; refreshes every {REFRESH_SECONDS} s. Rates are over the last "
            f"{RATE_SAMPLES - 1} s or so; counts are as INFO shows them.</footer>")


# -- numbers as people read them ------------------------------------------------------------------

BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def _bytes(n: float) -> str:
    power = 0
    while n >= 1024 and power < len(BYTE_UNITS) - 1:
        n /= 1024
        power += 1
    return f"{n:,} B" if power == 0 else f"{n:,.1f} {BYTE_UNITS[power]}"
