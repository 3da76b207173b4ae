"""``leaseq report``: analytics over a log read by ``leaseq-log``.

``build_report(spark, dirs, out, bucket_seconds, source_pattern)`` reads
the events of one or more data directories / archive dirs (as
``leaseq-log``'s paths: globs too, grouped into sources, one per pod) and
writes, per queue (all sources together), five Parquet tables under
``out``, a sixth per source and for all of them, and one self-contained
``out/report.html`` (plotly charts, the JS inline):

``throughput``  queue, bucket_start, push, claim, ack, nack, dead: events
                per time bucket; every bucket from the first to the last
                event is there for every queue (zeros included)
``latency``     queue, measure (``wait`` | ``processing``), count, p50_ms,
                p90_ms, p99_ms, max_ms (percentile_approx)
``rates``       queue, pushed, claims, acked, nacked, dead, jobs_claimed,
                jobs_retried, redelivered, expired_leases, retry_rate,
                dead_letter_rate
``errors``      queue, rank, kind (``nack`` | ``dead``), error, count: the
                10 most frequent nack errors and dead reasons per queue
``schedules``   queue, schedule, fired, skipped, first_fire, last_fire,
                max_gap_ms: per schedule, the jobs its ticks pushed
                (``fire`` rows), the ticks skipped (``skip`` rows), when it
                fired first and last, and the longest time between two fires
``sources``     source (``(all)`` for the total, last), events, first, last
                (timestamps), pushed, acked, nacked, dead, errors (nack +
                dead), push_per_s and ack_per_s (over the source's first to
                last event), wait and processing p50/p90/p99 in ms

Everything is computed with DataFrame operations on the executors; only the
aggregated tables come to the driver, for the HTML.

How the measures are derived (the log has no deliveries count and does not
record a lease that ran out):

- A job is (source, queue, generation, id): ids are a pod's own, and
  ``generation`` counts the QDROPs (``purge``) of the queue before the
  event, so a dropped and re-created queue that reuses ids does not mix old
  and new jobs.  Within a job events
  are ordered by ts, then by log position.
- wait: first ``claim`` - ``push`` of the job (jobs with both).
- processing: a ``claim`` - the event that ends that lease, when that is an
  ``ack``.  The lease-ending events are ``claim``, ``ack``, ``nack``,
  ``release``, ``dead`` and ``expire`` (``extend`` does not end a lease).
- redelivered: claims beyond the first of each job; retry_rate: jobs
  claimed more than once / jobs claimed; dead_letter_rate: dead / pushed.
- expired_leases: a ``claim`` whose next lease-ending event is an
  ``expire`` (logged since 0.2, when the daemon noticed it), or, in logs
  from before, another ``claim`` (the job was delivered again, so the first
  lease ran out) or a ``dead`` (MAXDELIVERIES or EXPIRE dead-letter a job
  when a claim would deliver it again: the lease before ran out too).

Runs under spark-submit as well::

    spark-submit pipeline/report.py /var/lib/leaseq /archive/leaseq --out /tmp/report
"""

from __future__ import annotations

import argparse
import html
import os
import sys
from datetime import datetime, timezone

TABLES = ("throughput", "latency", "rates", "errors", "schedules", "sources")
ALL = "(all)"
COUNTED = ("push", "claim", "ack", "nack", "dead")
LEASE_ENDS = ("claim", "ack", "nack", "release", "dead", "expire")
TOP_ERRORS = 10


class ReportError(ValueError):
    """A directory that cannot be read, or a bad option."""


def build_report(spark, dirs, out: str, bucket_seconds: int = 60, source_pattern: str | None = None) -> dict:
    """Compute the tables from the logs in ``dirs``, write them as Parquet
    under ``out/<table>/`` (overwritten) and ``out/report.html``.  Returns
    a summary: dirs, sources (source -> its directories), events, queues,
    first, last (datetimes, UTC, or None), html (the page's path)."""
    from pyspark.sql import functions as F

    from leaseq.pipeline import register
    from leaseq.pipeline.logsource import LogError, sources

    dirs = [str(d) for d in dirs]
    if not dirs:
        raise ReportError("no directory given")
    options = {"path": ",".join(dirs)}
    if source_pattern:
        options["sourcepattern"] = source_pattern
    try:
        found = sources(options)
    except LogError as e:
        raise ReportError(str(e).removeprefix("leaseq-log: ")) from None
    if int(bucket_seconds) < 1:
        raise ReportError("the bucket must be at least 1 second")
    bucket_ms = int(bucket_seconds) * 1000
    register(spark)

    raw = spark.read.format("leaseq-log").options(**options).load()
    # the log's position: partitions are the segments in order, rows in log
    # order within one, so this id orders the whole log (ties of ts broken)
    events = (raw.withColumn("seq", F.monotonically_increasing_id())
                 .withColumn("ms", F.unix_millis("ts"))
                 .persist())
    try:
        per_job = _per_job_tables(events)
        tables = {
            "throughput": _throughput(events, bucket_ms),
            "latency": per_job["latency"], "rates": per_job["rates"],
            "errors": _errors(events),
            "schedules": _schedules(events),
            "sources": _sources(events, per_job["measured"]),
        }
        for name in TABLES:
            tables[name].write.mode("overwrite").parquet(os.path.join(out, name))
        s = events.agg(F.count(F.lit(1)).alias("n"), F.min("ms").alias("first"), F.max("ms").alias("last"),
                       F.countDistinct("queue").alias("queues")).first()
    finally:
        events.unpersist()
    summary = {"dirs": dirs, "sources": found, "events": s["n"], "queues": s["queues"], "first": _utc(s["first"]),
               "last": _utc(s["last"]), "bucket_seconds": int(bucket_seconds)}
    # the small aggregated tables, read back from what was written
    data = {name: [r.asDict() for r in _collectable(spark.read.parquet(os.path.join(out, name)), name).collect()]
            for name in TABLES}
    path = os.path.join(out, "report.html")
    with open(path, "w", encoding="utf-8") as f:
        f.write(render_html(summary, data))
    summary["html"] = path
    return summary


def _utc(ms):
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def _count(event: str):
    from pyspark.sql import functions as F
    return F.sum(F.when(F.col("event") == event, 1).otherwise(0)).cast("long")


def _throughput(events, bucket_ms: int):
    """Counts per (queue, bucket); every bucket between the first and the
    last event for every queue, zeros included (the lines do not skip)."""
    from pyspark.sql import functions as F

    b = F.lit(bucket_ms)
    counted = (events.filter(F.col("event").isin(*COUNTED))
                     .withColumn("bucket", F.floor(F.col("ms") / b).cast("long"))
                     .groupBy("queue", "bucket").agg(*[_count(e).alias(e) for e in COUNTED]))
    span = events.agg(F.floor(F.min("ms") / b).cast("long").alias("lo"),
                      F.floor(F.max("ms") / b).cast("long").alias("hi"))
    buckets = span.select(F.explode(F.sequence("lo", "hi")).alias("bucket"))
    grid = events.select("queue").distinct().crossJoin(buckets)
    return (grid.join(counted, ["queue", "bucket"], "left").na.fill(0, list(COUNTED))
                .select("queue", F.timestamp_millis(F.col("bucket") * b).alias("bucket_start"), *COUNTED)
                .orderBy("queue", "bucket_start"))


def _per_job_tables(events) -> dict:
    """latency and rates: both need each job's events in order."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    in_queue = Window.partitionBy("source", "queue").orderBy("ms", "seq").rowsBetween(Window.unboundedPreceding, 0)
    dropped = (F.col("event") == "purge") & F.col("id").isNull()          # QDROP: the queue's next life
    jobs = (events.withColumn("generation", F.sum(F.when(dropped, 1).otherwise(0)).over(in_queue))
                  .filter(F.col("id").isNotNull()))
    key = ["source", "queue", "generation", "id"]

    # lease by lease: what ended each claim
    lease = Window.partitionBy(*key).orderBy("ms", "seq")
    ends = (jobs.filter(F.col("event").isin(*LEASE_ENDS))
                .withColumn("next_event", F.lead("event").over(lease))
                .withColumn("next_ms", F.lead("ms").over(lease))
                .filter(F.col("event") == "claim"))
    processing = (ends.filter(F.col("next_event") == "ack")
                      .select("source", "queue", (F.col("next_ms") - F.col("ms")).alias("ms"))
                      .withColumn("measure", F.lit("processing")))
    expired = (ends.filter(F.col("next_event").isin("expire", "claim", "dead"))
                   .groupBy("queue").agg(F.count(F.lit(1)).alias("expired_leases")))

    per_job = jobs.groupBy(*key).agg(
        F.min(F.when(F.col("event") == "push", F.col("ms"))).alias("pushed_ms"),
        F.min(F.when(F.col("event") == "claim", F.col("ms"))).alias("claimed_ms"),
        _count("claim").alias("claims"))
    wait = (per_job.filter(F.col("pushed_ms").isNotNull() & F.col("claimed_ms").isNotNull())
                   .select("source", "queue", (F.col("claimed_ms") - F.col("pushed_ms")).alias("ms"))
                   .withColumn("measure", F.lit("wait")))
    pct = F.percentile_approx("ms", F.array(F.lit(0.5), F.lit(0.9), F.lit(0.99)))
    measured = wait.unionByName(processing)
    latency = (measured.groupBy("queue", "measure")
                   .agg(F.count(F.lit(1)).alias("count"), pct.alias("p"), F.max("ms").alias("max_ms"))
                   .select("queue", "measure", "count", F.col("p")[0].alias("p50_ms"), F.col("p")[1].alias("p90_ms"),
                           F.col("p")[2].alias("p99_ms"), "max_ms")
                   .orderBy("queue", "measure"))

    claimed = per_job.groupBy("queue").agg(
        F.sum(F.when(F.col("claims") > 0, 1).otherwise(0)).cast("long").alias("jobs_claimed"),
        F.sum(F.when(F.col("claims") > 1, 1).otherwise(0)).cast("long").alias("jobs_retried"))
    counts = events.groupBy("queue").agg(_count("push").alias("pushed"), _count("claim").alias("claims"),
                                         _count("ack").alias("acked"), _count("nack").alias("nacked"),
                                         _count("dead").alias("dead"))
    rates = (counts.join(claimed, "queue", "left").join(expired, "queue", "left")
                   .na.fill(0, ["jobs_claimed", "jobs_retried", "expired_leases"])
                   .withColumn("redelivered", F.col("claims") - F.col("jobs_claimed"))
                   .withColumn("retry_rate", F.when(F.col("jobs_claimed") > 0,
                                                    F.col("jobs_retried") / F.col("jobs_claimed")))
                   .withColumn("dead_letter_rate", F.when(F.col("pushed") > 0, F.col("dead") / F.col("pushed")))
                   .select("queue", "pushed", "claims", "acked", "nacked", "dead", "jobs_claimed", "jobs_retried",
                           "redelivered", "expired_leases", "retry_rate", "dead_letter_rate")
                   .orderBy("queue"))
    return {"latency": latency, "rates": rates, "measured": measured}


def _sources(events, measured):
    """One row per source and one for all of them (``ALL``, last): counts,
    rates over the source's span, wait and processing percentiles."""
    from pyspark.sql import functions as F

    counts = [F.count(F.lit(1)).alias("events"), F.min("ts").alias("first"), F.max("ts").alias("last"),
              F.min("ms").alias("lo"), F.max("ms").alias("hi"),
              _count("push").alias("pushed"), _count("ack").alias("acked"), _count("nack").alias("nacked"),
              _count("dead").alias("dead")]

    percentiles = [F.percentile_approx(F.when(F.col("measure") == m, F.col("ms")),
                                       F.array(F.lit(0.5), F.lit(0.9), F.lit(0.99))).alias(m)
                   for m in ("wait", "processing")]
    per = events.groupBy("source").agg(*counts)
    total = events.agg(*counts).withColumn("source", F.lit(ALL))
    lat = measured.groupBy("source").agg(*percentiles)
    lat_total = measured.agg(*percentiles)
    both = (per.join(lat, "source", "left").withColumn("order", F.lit(0))
            .unionByName(total.crossJoin(lat_total.drop("source")).withColumn("order", F.lit(1))))
    span = F.greatest((F.col("hi") - F.col("lo")) / 1000.0, F.lit(1.0))    # at least a second
    return (both.select("source", "events", "first", "last", "pushed", "acked", "nacked", "dead",
                        (F.col("nacked") + F.col("dead")).alias("errors"),
                        (F.col("pushed") / span).alias("push_per_s"), (F.col("acked") / span).alias("ack_per_s"),
                        *[F.col(m)[i].alias(f"{m}_p{p}_ms") for m in ("wait", "processing")
                          for i, p in enumerate((50, 90, 99))], "order")
                .orderBy("order", "source").drop("order"))


def _errors(events):
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    counted = (events.filter(F.col("event").isin("nack", "dead") & F.col("error").isNotNull())
                     .groupBy("queue", F.col("event").alias("kind"), "error").agg(F.count(F.lit(1)).alias("count")))
    top = Window.partitionBy("queue").orderBy(F.desc("count"), "kind", "error")
    return (counted.withColumn("rank", F.row_number().over(top)).filter(F.col("rank") <= TOP_ERRORS)
                   .select("queue", "rank", "kind", "error", "count").orderBy("queue", "rank"))


def _schedules(events):
    """Per (queue, schedule): fires, skipped ticks, first and last fire, the
    longest time between two fires."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    fires = events.filter(F.col("event").isin("fire", "skip")).withColumnRenamed("consumer", "schedule")
    by_schedule = Window.partitionBy("source", "queue", "schedule").orderBy("ms", "seq")
    gaps = (fires.filter(F.col("event") == "fire")
                 .withColumn("gap", F.col("ms") - F.lag("ms").over(by_schedule)))
    fired = gaps.groupBy("queue", "schedule").agg(F.count(F.lit(1)).alias("fired"),
                                                  F.min("ts").alias("first_fire"), F.max("ts").alias("last_fire"),
                                                  F.max("gap").alias("max_gap_ms"))
    skipped = (fires.filter(F.col("event") == "skip").groupBy("queue", "schedule")
                    .agg(F.sum("deliveries").cast("long").alias("skipped")))
    return (fired.join(skipped, ["queue", "schedule"], "full").na.fill(0, ["fired", "skipped"])
                 .select("queue", "schedule", "fired", "skipped", "first_fire", "last_fire", "max_gap_ms")
                 .orderBy("queue", "schedule"))


def _collectable(df, name: str):
    from pyspark.sql import functions as F
    if name == "throughput":         # epoch ms: the page shows UTC whatever the session's time zone
        df = df.withColumn("bucket_start", F.unix_millis("bucket_start"))
    if name == "schedules":
        df = df.withColumn("first_fire", F.unix_millis("first_fire")).withColumn("last_fire",
                                                                                 F.unix_millis("last_fire"))
    if name == "sources":
        df = df.withColumn("first", F.unix_millis("first")).withColumn("last", F.unix_millis("last"))
    order = {"throughput": ["queue", "bucket_start"], "latency": ["queue", "measure"], "rates": ["queue"],
             "errors": ["queue", "rank"], "schedules": ["queue", "schedule"],
             "sources": [F.col("source") == ALL, "source"]}[name]
    return df.orderBy(*order)


# -- the HTML page ---------------------------------------------------------------------------------

COLORS = {"push": "#4C78A8", "claim": "#72B7B2", "ack": "#54A24B", "nack": "#F58518", "dead": "#E45756"}
PCTS = (("p50_ms", "p50", "#9ecae9"), ("p90_ms", "p90", "#4C78A8"), ("p99_ms", "p99", "#F58518"),
        ("max_ms", "max", "#E45756"))

CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #222; margin: 0;
       background: #f5f6f8; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 32px 48px; }
header { background: #1f2d3d; color: #fff; padding: 20px 32px; }
header h1 { margin: 0 0 6px; font-size: 26px; }
header .sub { color: #c9d3de; font-size: 14px; }
section { background: #fff; border-radius: 8px; box-shadow: 0 1px 3px rgba(0,0,0,.08); margin: 20px 0;
          padding: 16px 20px; }
h2 { font-size: 19px; margin: 4px 0 4px; }
p.note { color: #555; font-size: 13px; margin: 2px 0 10px; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: 4px 16px; margin: 0; font-size: 14px; }
dl.facts dt { color: #555; } dl.facts dd { margin: 0; font-family: ui-monospace, Menlo, monospace; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { padding: 5px 8px; border-bottom: 1px solid #e3e6ea; text-align: left; }
th { background: #f0f2f5; font-weight: 600; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
td.err { font-family: ui-monospace, Menlo, monospace; word-break: break-all; }
"""


def _fmt_time(dt) -> str:
    return "-" if dt is None else dt.strftime("%Y-%m-%d %H:%M:%S UTC")


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _table(header: list, rows: list, numeric: set) -> str:
    e = html.escape
    head = "".join(f'<th class="n">{e(h)}</th>' if h in numeric else f"<th>{e(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = []
        for h, v in zip(header, row):
            cls = ' class="n"' if h in numeric else (' class="err"' if h == "error" else "")
            cells.append(f"<td{cls}>{e(str(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def render_html(summary: dict, data: dict) -> str:
    """The page: header facts, then a section each (``SECTIONS``):
    throughput, latency, rates, errors and schedules."""
    e = html.escape
    queues = sorted({r["queue"] for name in TABLES if name != "sources" for r in data[name]})
    charts = _Charts()
    facts = [("sources", "<br>".join(f"{e(source)}: {e(', '.join(dirs))}"
                                     for source, dirs in summary["sources"].items())),
             ("time range", f"{_fmt_time(summary['first'])} → {_fmt_time(summary['last'])}"),
             ("events", f"{summary['events']:,}"),
             ("queues", e(", ".join(queues)) or "-")]
    body = [f"<header><h1>leaseq report</h1><div class=\"sub\">{summary['events']:,} events, "
            f"{len(queues)} queues, {len(summary['sources'])} sources, "
            f"{_fmt_time(summary['first'])} → {_fmt_time(summary['last'])}</div></header>",
            "<main>", "<section><h2>Input</h2><dl class=\"facts\">"
            + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts) + "</dl></section>"]
    for section in SECTIONS:
        anchor, title, note, content = section(summary, data, queues, charts)
        body.append(f'<section id="{anchor}"><h2>{e(title)}</h2><p class="note">{e(note)}</p>{content}</section>')
    body.append("</main>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>leaseq report</title>"
            f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>\n")


class _Charts:
    """The page's plotly figures: each as HTML, plotly's script with the
    first only, all laid out alike."""

    CONFIG = {"displayModeBar": False, "responsive": True}

    def __init__(self) -> None:
        self.count = 0

    def html(self, fig, height: int, **layout) -> str:
        fig.update_layout(height=height, template="plotly_white", margin=dict(l=60, r=20, t=80, b=40),
                          legend=dict(orientation="h", yref="container", yanchor="top", y=0.99, xanchor="right",
                                      x=1), **layout)
        self.count += 1
        return fig.to_html(full_html=False, include_plotlyjs=self.count == 1, config=self.CONFIG)


def _section_sources(summary: dict, data: dict, queues: list, charts: _Charts) -> tuple:
    """Each source and the total: rates and latency side by side, and the table."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rows = data["sources"]
    if not rows:
        return ("sources", "Sources", "Each source (pod) and all of them.", "<p>No events.</p>")
    names = [r["source"] for r in rows]
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.07,
                        subplot_titles=("Throughput (events/s)", "Wait p50 / p90 / p99 (ms)",
                                        "Processing p50 / p90 / p99 (ms)"))
    for field, label, color in (("push_per_s", "push/s", "#B279A2"), ("ack_per_s", "ack/s", COLORS["ack"])):
        fig.add_trace(go.Bar(x=names, y=[r[field] for r in rows], name=label, marker_color=color), row=1, col=1)
    for col, measure in ((2, "wait"), (3, "processing")):
        for (_f, label, color), p in zip(PCTS[:3], (50, 90, 99)):
            fig.add_trace(go.Bar(x=names, y=[r[f"{measure}_p{p}_ms"] for r in rows], name=label,
                                 legendgroup=label, showlegend=col == 2, marker_color=color), row=1, col=col)
    chart = charts.html(fig, 400, barmode="group")

    def ms(v):
        return "-" if v is None else f"{v:,}"

    numeric = {"events", "pushed", "acked", "errors", "push/s", "ack/s", "wait p50 / p90 / p99 ms",
               "processing p50 / p90 / p99 ms"}
    table = _table(["source", "events", "first", "last", "pushed", "acked", "errors", "push/s", "ack/s",
                    "wait p50 / p90 / p99 ms", "processing p50 / p90 / p99 ms"],
                   [[r["source"], f"{r['events']:,}", _fmt_time(_utc(r["first"])), _fmt_time(_utc(r["last"])),
                     f"{r['pushed']:,}", f"{r['acked']:,}", f"{r['errors']:,}", f"{r['push_per_s']:,.1f}",
                     f"{r['ack_per_s']:,.1f}",
                     " / ".join(ms(r[f"wait_p{p}_ms"]) for p in (50, 90, 99)),
                     " / ".join(ms(r[f"processing_p{p}_ms"]) for p in (50, 90, 99))] for r in rows], numeric)
    return ("sources", "Sources",
            (f"Each source (pod), and all of them in the row {ALL}: events per second over the source's first "
             "to last event; errors are nacks and dead jobs."), chart + table)


def _section_throughput(summary: dict, data: dict, queues: list, charts: _Charts) -> tuple:
    """One panel per queue, a line per event type."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    if data["throughput"]:
        tq = [q for q in queues if any(r["queue"] == q for r in data["throughput"])]
        fig = make_subplots(rows=len(tq), cols=1, shared_xaxes=True, vertical_spacing=min(0.08, 0.3 / len(tq)),
                            subplot_titles=tq)
        for i, q in enumerate(tq, 1):
            rows = [r for r in data["throughput"] if r["queue"] == q]
            x = [_utc(r["bucket_start"]) for r in rows]
            for ev in COUNTED:
                fig.add_trace(go.Scatter(x=x, y=[r[ev] for r in rows], mode="lines+markers", name=ev,
                                         legendgroup=ev, showlegend=i == 1, line=dict(color=COLORS[ev], width=2),
                                         marker=dict(size=5)), row=i, col=1)
            fig.update_yaxes(title_text="events", rangemode="tozero", row=i, col=1)
        chart = charts.html(fig, 140 + 200 * len(tq))
    else:
        chart = "<p>No events.</p>"
    return ("throughput", "Throughput", f"Events per {summary['bucket_seconds']} s bucket (UTC), per queue.", chart)


def _section_latency(summary: dict, data: dict, queues: list, charts: _Charts) -> tuple:
    """Wait and processing side by side, grouped bars per queue, and their table."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    if data["latency"]:
        fig = make_subplots(rows=1, cols=2, subplot_titles=("Wait (push → first claim)",
                                                            "Processing (claim → ack)"), horizontal_spacing=0.1)
        for col, measure in ((1, "wait"), (2, "processing")):
            rows = [r for r in data["latency"] if r["measure"] == measure]
            for field, label, color in PCTS:
                fig.add_trace(go.Bar(x=[r["queue"] for r in rows], y=[r[field] for r in rows], name=label,
                                     legendgroup=label, showlegend=col == 1, marker_color=color,
                                     hovertemplate="%{x}: %{y} ms<extra>" + label + "</extra>"), row=1, col=col)
            fig.update_yaxes(title_text="ms", row=1, col=col)
        chart = charts.html(fig, 440, barmode="group")
        chart += _table(["queue", "measure", "count", "p50 ms", "p90 ms", "p99 ms", "max ms"],
                        [[r["queue"], r["measure"], r["count"], r["p50_ms"], r["p90_ms"], r["p99_ms"], r["max_ms"]]
                         for r in data["latency"]], {"count", "p50 ms", "p90 ms", "p99 ms", "max ms"})
    else:
        chart = "<p>No job was claimed.</p>"
    return ("latency", "Wait and processing time",
            "Percentiles (approximate, Spark percentile_approx) in milliseconds.", chart)


def _section_rates(summary: dict, data: dict, queues: list, charts: _Charts) -> tuple:
    """Retry and dead-letter rates per queue, and the counts they come from."""
    import plotly.graph_objects as go

    if data["rates"]:
        rows = data["rates"]
        fig = go.Figure()
        for field, label, color in (("retry_rate", "retry rate", "#F58518"),
                                    ("dead_letter_rate", "dead-letter rate", "#E45756")):
            values = [None if r[field] is None else 100 * r[field] for r in rows]
            fig.add_trace(go.Bar(x=[r["queue"] for r in rows], y=values, name=label, marker_color=color,
                                 text=[_pct(r[field]) for r in rows], textposition="outside", cliponaxis=False))
        numeric = {"pushed", "claims", "acked", "nacked", "dead", "redelivered", "expired leases", "retry rate",
                   "dead-letter rate"}
        table = _table(["queue", "pushed", "claims", "acked", "nacked", "dead", "redelivered", "expired leases",
                        "retry rate", "dead-letter rate"],
                       [[r["queue"], r["pushed"], r["claims"], r["acked"], r["nacked"], r["dead"], r["redelivered"],
                         r["expired_leases"], _pct(r["retry_rate"]), _pct(r["dead_letter_rate"])] for r in rows],
                       numeric)
        chart = charts.html(fig, 400, barmode="group", yaxis=dict(title="% ", rangemode="tozero")) + table
    else:
        chart = "<p>No events.</p>"
    return ("rates", "Retries and dead letters",
            "Retry rate: jobs claimed more than once / jobs claimed. Dead-letter rate: dead / pushed. "
            "Expired leases: a claim followed by another claim or a dead of the same job with no ack, "
            "nack or release between.", chart)


def _section_errors(summary: dict, data: dict, queues: list, charts: _Charts) -> tuple:
    if data["errors"]:
        chart = _table(["queue", "rank", "kind", "error", "count"],
                       [[r["queue"], r["rank"], r["kind"], r["error"], r["count"]] for r in data["errors"]],
                       {"rank", "count"})
    else:
        chart = "<p>No nack errors and no dead jobs.</p>"
    return ("errors", "Top errors", f"The {TOP_ERRORS} most frequent nack errors and dead reasons per queue.", chart)


def _section_schedules(summary: dict, data: dict, queues: list, charts: _Charts) -> tuple:
    if data["schedules"]:
        chart = _table(["queue", "schedule", "fired", "skipped", "first fire", "last fire", "longest gap"],
                       [[r["queue"], r["schedule"], r["fired"], r["skipped"], _fmt_time(_utc(r["first_fire"])),
                         _fmt_time(_utc(r["last_fire"])),
                         "-" if r["max_gap_ms"] is None else f"{r['max_gap_ms'] / 1000:,.1f} s"]
                        for r in data["schedules"]], {"fired", "skipped", "longest gap"})
    else:
        chart = "<p>No schedule fired.</p>"
    return ("schedules", "Schedules",
            "Jobs each schedule's ticks pushed, ticks that pushed none (missed and skipped, or OVERLAP "
            "skip), and the longest time between two fires.", chart)


# the page's sections, in order: each (summary, data, queues, charts) -> (anchor, title, note, HTML)
SECTIONS = (_section_sources, _section_throughput, _section_latency, _section_rates, _section_errors,
            _section_schedules)


# -- spark-submit ------------------------------------------------------------------------------------

def parse_bucket(text: str) -> int:
    """``90``, ``30s``, ``1m``, ``2h`` -> seconds."""
    t = str(text).strip().lower()
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        n = int(t[:-1]) * units[t[-1]] if t and t[-1] in units else int(t)
    except ValueError:
        n = 0
    if n < 1:
        raise ReportError(f"bad bucket {text!r}: a number of seconds, or with s, m or h (30s, 1m, 1h)")
    return n


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="report.py", description="leaseq analytics report over data directories")
    parser.add_argument("dirs", nargs="+", help="data directories and archive dirs")
    parser.add_argument("--out", required=True, help="output directory (Parquet tables and report.html)")
    parser.add_argument("--bucket", default="1m", help="throughput bucket: 30s, 1m, 1h ... (default 1m)")
    parser.add_argument("--source-pattern", default=None, help="regular expression naming each directory's source")
    args = parser.parse_args(argv)
    from pyspark.sql import SparkSession

    from leaseq.pipeline.logsource import LogError, sources

    try:
        bucket = parse_bucket(args.bucket)
        try:                            # before Spark starts: a typo fails in a moment
            sources({"path": ",".join(args.dirs), "sourcepattern": args.source_pattern})
        except LogError as e:
            raise ReportError(str(e).removeprefix("leaseq-log: ")) from None
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    spark = SparkSession.builder.appName("leaseq-report").getOrCreate()
    try:
        s = build_report(spark, args.dirs, args.out, bucket, args.source_pattern)
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    print(f"wrote {s['html']} and {', '.join(TABLES)} under {args.out}: {s['events']} events, {s['queues']} queues")
    return 0


if __name__ == "__main__":
    sys.exit(main())
