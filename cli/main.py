"""The ``leaseq`` command line: ``leaseq serve``, ``leaseq check``, ``leaseq switchover``, ``leaseq report``,
``leaseq docs``, ``leaseq bench ...``, ``leaseq --version``."""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
import time
from importlib.metadata import PackageNotFoundError, version

import click

from leaseq.daemon import config


def _version() -> str:
    """The package's version and which flavour runs: ``0.1.0 (compiled)``,
    ``(compiled, profile-guided)`` or ``(pure)`` (docs/performance.md)."""
    from leaseq.daemon.flavour import FLAVOUR, PROFILE_GUIDED
    try:
        number = version("leaseq")
    except PackageNotFoundError:
        number = "unknown"
    return f"{number} ({FLAVOUR}{', profile-guided' if PROFILE_GUIDED else ''})"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(_version(), prog_name="leaseq")
def main() -> None:
    """leaseq: a job-queue daemon that speaks the Redis protocol."""


_METAVARS = {"int": "N", "ms": "MS", "bytes": "SIZE", "bool": "yes|no", "str": "TEXT"}


def _setting_options(command):
    """One ``--name VALUE`` option per setting of ``config.FIELDS``, in its
    order, with its help and default; the text goes to ``config.read_flags``
    (parsed as the file's values are), so the options stay plain strings."""
    for name, f in reversed(config.FIELDS.items()):
        meta = f.metadata
        metavar = "|".join(meta["choices"]) if meta["kind"] in ("choice", "flags") else _METAVARS[meta["kind"]]
        default = config.file_text(name, f.default)
        command = click.option(f"--{name}", f"setting_{config.attr_name(name)}", metavar=metavar,
                               help=f"{meta['help']} [default: {default}]")(command)
    return command


@main.command()
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="Config file with Redis-style 'name value' lines.")
@click.option("--repair", is_flag=True,
              help="Start even if the log is corrupt, dropping the unreadable bytes (logged).")
@_setting_options
def serve(config_file, repair, **given) -> None:
    """Run the daemon in the foreground (logs go to stderr).

    Every setting is an option of the same name as in the config file
    (--http-port 9479, --protected-mode no, --maxmemory 1gb); flags win over
    LEASEQ_<NAME> variables, which win over the config file."""
    texts = {name: given[f"setting_{config.attr_name(name)}"] for name in config.FIELDS}
    try:
        settings = config.load(config_file, config.read_flags(texts))
    except config.ConfigError as e:
        raise click.ClickException(str(e)) from None
    logging.basicConfig(stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("leaseq").setLevel(settings.loglevel.upper())
    log = logging.getLogger("leaseq.daemon")

    import uvloop

    from leaseq.storage.datadir import DataDir
    from leaseq.storage.recovery import CorruptLog
    from leaseq.storage.wal import DirectoryLocked

    from leaseq.daemon.server import serve as run_server

    def open_datadir():
        return DataDir.open(settings.dir, int(time.time() * 1000), segment_size=settings.segment_size,
                            lease_sync=settings.lease_durability == "fsync", repair=repair,
                            boot=not settings.replicaof)      # a replica's epoch is its primary's

    try:
        uvloop.run(run_server(settings, open_datadir, config_file))
    except (CorruptLog, DirectoryLocked) as e:
        log.error("%s", e)
        sys.exit(1)
    except OSError as e:
        log.error("cannot start: %s (port %s, data directory %s)", e, settings.port, os.path.abspath(settings.dir))
        sys.exit(1)


@main.command()
@click.argument("directory", type=click.Path(file_okay=True, dir_okay=True))
@click.option("--repair", is_flag=True,
              help="Change the directory as `serve --repair` would: truncate a torn tail, cut out "
                   "unreadable bytes, move damaged files aside; print what was dropped.")
def check(directory, repair) -> None:
    """Verify a data directory offline (the daemon must not be running on it).

    Exit 0 with a summary (snapshot, segments, torn tail, jobs per queue), or
    1 naming the file and offset of the first corruption.  Without --repair
    no file changes."""
    from leaseq.storage.check import CheckError
    from leaseq.storage.check import check as run_check
    from leaseq.storage.recovery import CorruptLog

    if repair:      # say what --repair does as it does it, as `serve --repair` logs it
        logging.basicConfig(stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
        logging.getLogger("leaseq").setLevel("WARNING")
    else:
        logging.getLogger("leaseq").setLevel("CRITICAL")
    try:
        report = run_check(directory, repair=repair)
    except (CheckError, CorruptLog) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    except OSError as e:
        click.echo(f"error: cannot check data directory {directory}: {e}", err=True)
        sys.exit(1)
    for line in report.lines():
        click.echo(line)


@main.command()
@click.option("--sentinels", envvar="SENTINELS", metavar="HOST:PORT[,HOST:PORT...]",
              help="The sentinels that watch the node (env SENTINELS).")
@click.option("--without-sentinel", is_flag=True,
              help="No Sentinel watches the node: hand the role over with FAILOVER instead.")
@click.option("--service", envvar="SENTINEL_SERVICE", default="leaseq", show_default=True,
              help="The name the sentinels monitor it by (env SENTINEL_SERVICE).")
@click.option("--host", default="127.0.0.1", show_default=True, help="The node to hand over.")
@click.option("--port", envvar="LEASEQ_PORT", type=int, default=config.FIELDS["port"].default, show_default=True,
              help="Its RESP port (env LEASEQ_PORT, as `leaseq serve`).")
@click.option("--user", default=None, help="An ACL user to log in as (default: the default user).")
@click.option("--password", envvar="LEASEQ_REQUIREPASS", default=None,
              help="Its password (env LEASEQ_REQUIREPASS, as `leaseq serve`).")
@click.option("--sentinel-password", envvar="SENTINEL_PASSWORD", default=None,
              help="The sentinels' own password, if they have one (env SENTINEL_PASSWORD).")
@click.option("--timeout", type=click.FloatRange(min=0.5), default=10.0, show_default=True,
              help="Seconds for the whole handover; writes wait at most this long.")
def switchover(sentinels, without_sentinel, service, host, port, user, password, sentinel_password,
               timeout) -> None:
    """Hand the primary's role to its replica before a planned stop: writes
    wait while the replica catches up, the sentinels promote it (or, with
    --without-sentinel, FAILOVER does), this node follows it, and the writes
    that waited go to the new primary.

    Exit 0 when done, or when the node is not a primary (nothing to do); 1,
    saying why, when it stays the primary (writes go on there).  Meant for a
    Kubernetes preStop hook (conf/k8s-replicated.yaml)."""
    import redis

    from leaseq.cli.switchover import SwitchoverError, parse_sentinels
    from leaseq.cli.switchover import switchover as hand_over
    from leaseq.cli.switchover import without_sentinel as hand_over_alone

    if bool(sentinels) == without_sentinel:
        raise click.UsageError("give --sentinels (or SENTINELS), or --without-sentinel for a pair no Sentinel "
                               "watches")
    try:
        addresses = parse_sentinels(sentinels) if sentinels else []
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--sentinels") from None
    wait = timeout + 5
    node = redis.Redis(host=host, port=port, username=user, password=password, socket_timeout=wait)
    watchers = [redis.Redis(host=h, port=p, password=sentinel_password, socket_timeout=2) for h, p in addresses]
    say = lambda line: click.echo(f"switchover: {line}")    # noqa: E731
    try:
        if without_sentinel:
            hand_over_alone(node, timeout, say)
        else:
            hand_over(node, watchers, service, timeout, say)
    except (SwitchoverError, redis.RedisError, OSError) as e:
        click.echo(f"switchover: error: {e}", err=True)
        sys.exit(1)
    finally:
        node.close()
        for w in watchers:
            w.close()


@main.command()
@click.option("--check", is_flag=True, help="Exit 1 if a generated file differs instead of writing it.")
@click.option("--dir", "docs_dir", default="docs", show_default=True, type=click.Path(file_okay=False),
              help="The docs folder to write in.")
def docs(check, docs_dir) -> None:
    """Generate docs/commands.md from the command table and the settings
    table of docs/operations.md from the settings' definitions."""
    from leaseq.cli.docs import generated
    try:
        wanted = generated(docs_dir)
    except (OSError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    for path, text in wanted.items():
        try:
            with open(path, encoding="utf-8") as f:
                same = f.read() == text
        except OSError:
            same = False
        if check:
            if not same:
                raise click.ClickException(f"{path} is out of date; run `leaseq docs`")
        elif not same:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            click.echo(f"wrote {path}")


@main.command()
@click.argument("dirs", nargs=-1, required=True, type=click.Path())
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="Output directory: one Parquet table per folder and report.html (overwritten).")
@click.option("--bucket", default="1m", show_default=True, help="Throughput bucket: 30s, 1m, 1h or seconds.")
@click.option("--source-pattern", default=None,
              help="Regular expression naming each directory's source (pod) from its path: the first group, "
                   "else the match (default: the directory's parent's name).")
def report(dirs, out, bucket, source_pattern) -> None:
    """Analytics over data directories / archive dirs (globs too, one source per pod): throughput,
    wait and processing percentiles, retry and dead-letter rates, top errors, schedules, each source
    and the total (Parquet), and an HTML page with charts.  Runs Spark locally (the spark extra)."""
    try:
        from leaseq.pipeline.logsource import LogError, sources
        from leaseq.pipeline.report import TABLES, ReportError, build_report, parse_bucket
    except ImportError as e:
        raise click.ClickException(f"{e}: install the spark extra (pip install 'leaseq[spark]')") from None
    try:
        seconds = parse_bucket(bucket)
        try:                            # before Spark starts: a typo fails in a moment
            found = sources({"path": ",".join(dirs), "sourcepattern": source_pattern})
        except LogError as e:
            raise ReportError(str(e).removeprefix("leaseq-log: ")) from None
    except ReportError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[*]").appName("leaseq-report")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             # one machine: a few shuffle partitions per core, not Spark's 200
             .config("spark.sql.shuffle.partitions", str(max(4, 2 * (os.cpu_count() or 1))))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        summary = build_report(spark, list(dirs), out, seconds, source_pattern)
    except ReportError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    finally:
        spark.stop()
    click.echo(f"wrote {summary['html']}, Parquet tables {', '.join(TABLES)} under {out}: "
               f"{summary['events']} events, {summary['queues']} queues, {len(found)} sources")


@main.group()
def bench() -> None:
    """Benchmarks: each starts its own daemons and prints figures (needs redis-py: the bench extra)."""


# options several benchmarks share
JSON_OPTION = click.option("--json", "json_path", type=click.Path(dir_okay=False),
                           help="Also write the figures as JSON here.")
DURABILITY_OPTION = click.option("--durability", type=click.Choice(["memory", "async", "fsync"]), default="fsync",
                                 show_default=True, help="The queues' durability.")


@bench.command("storage")
@click.option("--jobs", type=click.IntRange(1), help="Live jobs for recovery, memory and latency (default 1,000,000).")
@click.option("--cycles", type=click.IntRange(1), help="Push/claim/ack cycles for the churn (default 300,000).")
@JSON_OPTION
@click.option("--quick", is_flag=True, help="100,000 jobs and 30,000 cycles, for a fast try.")
def bench_storage(jobs, cycles, json_path, quick) -> None:
    """Recovery after kill -9 (log, snapshot), memory per job, data directory size under churn,
    latency during a snapshot."""
    try:
        from leaseq.bench import storage
    except ImportError as e:
        raise click.ClickException(f"{e}: install the bench extra (pip install 'leaseq[bench]')") from None
    if jobs is None:
        jobs = storage.QUICK_JOBS if quick else storage.DEFAULT_JOBS
    if cycles is None:
        cycles = storage.QUICK_CYCLES if quick else storage.DEFAULT_CYCLES
    try:
        storage.run(jobs, cycles, json_path)
    except RuntimeError as e:
        raise click.ClickException(str(e)) from None


@bench.command("spark")
@click.option("--rows", type=click.IntRange(1), help="Rows per write (default 1,000,000).")
@click.option("--side", type=click.Choice(["write", "read", "both"]), default="both", show_default=True,
              help="The write side (the leaseq sink), the read side (leaseq-log) or both.")
@click.option("--sources", type=click.IntRange(1), default=10, show_default=True,
              help="Read side: sources read together (copies of one daemon's log).")
@click.option("--jobs", type=click.IntRange(1), help="Read side: jobs in that log (default 200,000; 3 events each).")
@click.option("--live-seconds", type=click.FloatRange(1), default=20, show_default=True,
              help="Read side: how long the live daemon is pushed to for the latency.")
@JSON_OPTION
@click.option("--quick", is_flag=True, help="100,000 rows and 20,000 jobs, for a fast try.")
def bench_spark(rows, side, sources, jobs, live_seconds, json_path, quick) -> None:
    """Rows/s from Spark into the daemon (no key, keyed), and duplicate jobs
    after a forced task retry and a full re-run; events/s of leaseq-log read
    in batch and as a stream of many sources, a live stream's latency and its
    restart from the checkpoint (needs the spark extra)."""
    try:
        from leaseq.bench import spark
    except ImportError as e:
        raise click.ClickException(f"{e}: install the spark extra (pip install 'leaseq[spark]')") from None
    if rows is None:
        rows = spark.QUICK_ROWS if quick else spark.DEFAULT_ROWS
    if jobs is None:
        jobs = spark.QUICK_READ_JOBS if quick else spark.READ_JOBS
    try:
        spark.run(rows, json_path, side=side, sources=sources, jobs=jobs, live_seconds=live_seconds)
    except RuntimeError as e:
        raise click.ClickException(str(e)) from None


def _bench(name: str, *args) -> None:
    """Run ``leaseq.bench.<name>.run(*args)``; its RuntimeError is the command's error."""
    module = importlib.import_module(f"leaseq.bench.{name}")
    try:
        module.run(*args)
    except RuntimeError as e:
        raise click.ClickException(str(e)) from None


@bench.command("claims")
@click.option("--jobs", type=click.IntRange(800), default=100_000, show_default=True,
              help="Jobs preloaded and claimed in each run.")
@click.option("--reps", type=click.IntRange(1), default=3, show_default=True,
              help="Interleaved repetitions; the table shows medians.")
@click.option("--redis-server", "redis_server", default="redis-server", show_default=True,
              help="The redis-server XREADGROUP runs on; when it is missing, leaseq's forms run alone.")
@JSON_OPTION
def bench_claims(jobs, reps, redis_server, json_path) -> None:
    """A Python consumer's CPU per claimed job: QCLAIM's maps, QCLAIM ... COMPACT,
    leaseq.client, and XREADGROUP on redis-server (claim 100 -> ack, 8 connections, memory class)."""
    _bench("claims", jobs, reps, redis_server, json_path)


@bench.command("workers")
@click.option("--jobs", type=click.IntRange(100), default=20_000, show_default=True, help="Jobs drained in each run.")
@click.option("--reps", type=click.IntRange(1), default=3, show_default=True,
              help="Interleaved repetitions; the table shows medians.")
@click.option("--node-concurrency", type=click.IntRange(1), default=50, show_default=True,
              help="The Node worker's concurrency.")
@click.option("--durability", type=click.Choice(["memory", "async", "fsync"]), default="memory", show_default=True,
              help="The queues' durability.")
@JSON_OPTION
def bench_workers(jobs, reps, node_concurrency, durability, json_path) -> None:
    """Jobs/s through a worker with an empty handler: the Node package's Worker beside leaseq.client's
    (threads and asyncio, at several concurrencies)."""
    _bench("workers", jobs, reps, node_concurrency, durability, json_path)


@bench.command("fsync")
@click.option("--count", type=click.IntRange(10), default=2000, show_default=True,
              help="Writes, each followed by an fdatasync, per way and round.")
@click.option("--bytes", "size", type=click.IntRange(1, 1 << 20), default=940, show_default=True,
              help="Bytes a write (940: a light turn's records at 5,000 single-job pushes a second).")
@click.option("--rounds", type=click.IntRange(1), default=3, show_default=True, help="Rounds; the table shows medians.")
@click.option("--reserve", type=click.IntRange(4096), default=256 << 10, show_default=True,
              help="Bytes of room made at a time (the daemon's: 256 KiB).")
@click.option("--dir", "directory", type=click.Path(exists=True, file_okay=False),
              help="Where the files go (default: the current directory).")
@JSON_OPTION
def bench_fsync(count, size, rounds, reserve, directory, json_path) -> None:
    """This disk's fdatasync after a write that grows the file, against one into room
    made ahead with posix_fallocate, one into zeros written ahead (as the log does) and one
    over a file of zeros."""
    _bench("fsync", count, size, rounds, reserve, directory, json_path)


@bench.command("path")
@click.option("--only", default="batches,single", show_default=True,
              help="Loads: batches (QPUSHMANY, QCLAIM COUNT 100, QACK of 100), single (a blocked QCLAIM, "
                   "the QPUSH that wakes it, its QACK).")
@click.option("--rounds", type=click.IntRange(1), help="Rounds per run (default 2,000 batches, 20,000 single; "
                                                       "with --instructions 100 and 500).")
@click.option("--instructions", is_flag=True,
              help="Count instructions per job under valgrind instead of timing: a figure the machine's load "
                   "does not move.")
@click.option("--functions", type=click.IntRange(0), default=0, show_default=True,
              help="With --instructions: also list the N C functions that ran the most instructions per job.")
@click.option("--gap-us", type=click.IntRange(0, 1_000_000), default=0, show_default=True,
              help="Sleep this many us after each round, off the clock: the CPU idles between jobs, as it does "
                   "between the requests of a daemon at 5,000 single-job pushes a second.")
@JSON_OPTION
def bench_path(only, rounds, instructions, functions, gap_us, json_path) -> None:
    """The daemon's own work per job, in one process (no socket, no other process)."""
    from leaseq.bench import path
    modes = tuple(m.strip() for m in only.split(",") if m.strip())
    unknown = [m for m in modes if m not in path.MODES]
    if unknown or not modes:
        raise click.BadParameter(f"unknown load {', '.join(unknown) or '(none)'}; "
                                 f"choose from {', '.join(path.MODES)}", param_hint="--only")
    try:
        if functions and not instructions:
            raise click.BadParameter("needs --instructions", param_hint="--functions")
        if gap_us and instructions:
            raise click.BadParameter("times the work; --instructions counts it, which a gap does not change",
                                     param_hint="--gap-us")
        figures = path.run(modes, rounds, instructions, functions, gap_us)
    except RuntimeError as e:
        raise click.ClickException(str(e)) from None
    if json_path:
        with open(json_path, "w") as f:
            json.dump(figures, f, indent=2)


@bench.command("floor")
@click.option("--queue", is_flag=True,
              help="Jobs instead of PINGs: W3 at a fixed rate (memory class) against redis-server, a minimal "
                   "Python queue on uvloop and leaseq.")
@click.option("--rate", type=click.IntRange(12),
              help="PINGs a second [default: 15,000, the three requests of a job at W3's 5,000 jobs a second]; "
                   "with --queue, jobs a second [default: 5,000].")
@click.option("--seconds", type=click.FloatRange(0.5), help="Length of each run [default: 8; with --queue 10].")
@click.option("--reps", type=click.IntRange(1), default=3, show_default=True,
              help="Interleaved repetitions; the table shows medians.")
@click.option("--redis-server", "redis_server", default="redis-server", show_default=True,
              help="The redis-server to compare with; when it is missing, the floor and leaseq run alone.")
@click.option("--instructions", is_flag=True,
              help="With --queue: count each server's user-space instructions and cache misses a job under "
                   "valgrind (callgrind) instead of timing it, jobs one at a time; --rate, --seconds and --reps "
                   "do not apply.")
@click.option("--functions", type=click.IntRange(0), default=0, show_default=True,
              help="With --instructions: also list leaseq's N C functions with the most cache misses per job.")
@click.option("--claimers", type=click.IntRange(1, 16), default=1, show_default=True,
              help="With --instructions: claims parked on the queue, one woken a job (W3 at a fixed rate parks 4).")
@JSON_OPTION
def bench_floor(queue, rate, seconds, reps, redis_server, instructions, functions, claimers, json_path) -> None:
    """Server CPU per PING at a fixed rate: redis-server, a bare uvloop server (the least any Python
    server on uvloop spends for a request) and leaseq; with --queue, per job of W3 beside a minimal
    Python queue (the least any Python queue on uvloop spends for a job)."""
    from leaseq.bench import floor
    if instructions and not queue:
        raise click.UsageError("--instructions counts jobs: give it with --queue")
    if instructions and (rate or seconds):
        raise click.UsageError("--instructions runs jobs one at a time: --rate and --seconds do not apply")
    if functions and not instructions:
        raise click.BadParameter("needs --instructions", param_hint="--functions")
    if claimers != 1 and not instructions:
        raise click.BadParameter("needs --instructions", param_hint="--claimers")
    try:
        if instructions:
            from leaseq.bench import instructions as counting
            counting.run(redis_server, json_path, functions=functions, claimers=claimers)
            return
        run = floor.run_queue if queue else floor.run
        run(rate or (5000 if queue else 15000), seconds or (10 if queue else 8), reps, redis_server, json_path)
    except RuntimeError as e:
        raise click.ClickException(str(e)) from None


@bench.command("http")
@click.option("--seconds", type=click.FloatRange(1), default=10, show_default=True, help="Length of each run.")
@click.option("--queues", type=click.IntRange(1), default=200, show_default=True, help="Queues /metrics reports.")
@JSON_OPTION
def bench_http(seconds, queues, json_path) -> None:
    """QPUSH latency with and without a /metrics scrape every second."""
    _bench("http", seconds, queues, json_path)


@bench.command("search")
@click.option("--jobs", type=click.IntRange(1000), default=1_000_000, show_default=True,
              help="Jobs in the queue searched.")
@click.option("--count", type=click.IntRange(1, 100_000), default=10_000, show_default=True,
              help="COUNT of each QSCAN call of the QSCAN loop.")
@click.option("--slice", "search_slice", type=click.IntRange(1), default=None,
              help="The daemon's search-slice (default: its own default).")
@JSON_OPTION
def bench_search(jobs, count, search_slice, json_path) -> None:
    """A PING/QLEN client's reply times while the status page searches a queue of a million jobs,
    a QSCAN MATCH loop walks it and a bulk cancel runs (target: none over 50 ms)."""
    _bench("search", jobs, count, search_slice, json_path)


@bench.command("history")
@click.option("--rate", type=click.IntRange(1), default=5000, show_default=True, help="Single QPUSHes a second.")
@click.option("--seconds", type=click.FloatRange(1), default=4, show_default=True, help="Length of each CPU run.")
@click.option("--rounds", type=click.IntRange(1), default=10, show_default=True,
              help="CPU runs each way, history on and off alternating.")
@click.option("--hours", type=click.IntRange(1), default=72, show_default=True, help="Hours of minutes filled.")
@click.option("--queues", type=click.IntRange(1), default=20, show_default=True, help="Queues filled and charted.")
@JSON_OPTION
def bench_history(rate, seconds, rounds, hours, queues, json_path) -> None:
    """History's CPU a job (on vs history-hours 0), its bytes a queue at 72 h, the page with charts."""
    _bench("history", rate, seconds, rounds, hours, queues, json_path)


@bench.command("flow")
@click.option("--seconds", type=click.FloatRange(1), default=10, show_default=True, help="Length of each run.")
@click.option("--n", type=click.IntRange(1), default=50, show_default=True, help="Jobs a window may hand out.")
@click.option("--window", "window_ms", type=click.IntRange(10), default=500, show_default=True, help="The window, ms.")
@click.option("--claimers", type=click.IntRange(1, 64), default=4, show_default=True, help="Blocked claimers.")
@JSON_OPTION
def bench_flow(seconds, n, window_ms, claimers, json_path) -> None:
    """How exact RATE and GROUP-RATE are: the most hand-outs seen in any window, over n."""
    _bench("flow", seconds, n, window_ms, claimers, json_path)


@bench.command("lifecycle")
@click.option("--cancels", type=click.IntRange(1), default=100, show_default=True,
              help="Running handlers to cancel, one at a time.")
@click.option("--results", type=click.IntRange(1), default=1000, show_default=True,
              help="Acks with a RESULT, each awaited by a blocked QRESULT.")
@click.option("--heartbeat", "heartbeat_ms", type=click.IntRange(10), default=100, show_default=True,
              help="The worker's heartbeat_ms.")
@DURABILITY_OPTION
@JSON_OPTION
def bench_lifecycle(cancels, results, heartbeat_ms, durability, json_path) -> None:
    """How long a QCANCEL takes to reach a running handler, and an ack to wake QRESULT BLOCK."""
    _bench("lifecycle", cancels, results, heartbeat_ms, durability, json_path)


@bench.command("workflows")
@click.option("--jobs", type=click.IntRange(10), default=10_000, show_default=True,
              help="Links of the chain, and parents of the fan-in.")
@DURABILITY_OPTION
@JSON_OPTION
def bench_workflows(jobs, durability, json_path) -> None:
    """A chain of jobs, a fan-in of parents (AFTER) and a schedule firing: time and memory."""
    _bench("workflows", jobs, durability, json_path)


@bench.command("fullsync")
@click.option("--jobs", type=click.IntRange(1), help="Live jobs on the primary (default 1,000,000).")
@JSON_OPTION
@click.option("--quick", is_flag=True, help="50,000 jobs, for a fast try.")
def bench_fullsync(jobs, json_path, quick) -> None:
    """A replica's full sync from a primary holding N jobs: time to the link and to equal QLEN, and the
    primary's QPUSH latency meanwhile."""
    from leaseq.bench import fullsync
    _bench("fullsync", jobs or (fullsync.QUICK_JOBS if quick else fullsync.DEFAULT_JOBS), json_path)


@bench.command("failover")
@click.option("--cycles", type=click.IntRange(1), default=10, show_default=True,
              help="Kills of the primary (each followed by a failover) per mode.")
@click.option("--ack", "acks", default="1,0", show_default=True,
              help="min-replicas-to-ack of each run: 1 (answers wait for the replica's disk), 0 (asynchronous).")
@click.option("--run-seconds", "run_s", type=click.FloatRange(0.5), default=2.0, show_default=True,
              help="Load between a failover and the next kill.")
@click.option("--dir", "directory", type=click.Path(file_okay=False, exists=True),
              help="Where the runs' data directories go (default: the system's temporary directory).")
@click.option("--redis-server", "redis_server", default="redis-server", show_default=True,
              help="The redis-server that runs Sentinel (redis-server --sentinel).")
@JSON_OPTION
def bench_failover(cycles, acks, run_s, directory, redis_server, json_path) -> None:
    """The failover soak: a primary, a replica and 3 Redis Sentinels under a producer and workers,
    the primary killed with SIGKILL each cycle; pushes lost, acked jobs back, ticks twice, failover time."""
    try:
        modes = sorted({int(a) for a in acks.split(",")}, reverse=True)
    except ValueError:
        raise click.BadParameter(f"a comma-separated list of numbers, not {acks!r}", param_hint="--ack") from None
    if any(a not in (0, 1) for a in modes):
        raise click.BadParameter("the soak has one replica: 1 or 0", param_hint="--ack")
    _bench("failover", cycles, modes, run_s, directory, redis_server, json_path)


def _names(value: str, allowed: tuple, what: str) -> tuple:
    """A comma-separated selection, checked against ``allowed``, in
    ``allowed``'s order; ``w3`` stands for both W3 workloads."""
    names = {n.strip().lower() for n in value.split(",") if n.strip()}
    if "w3" in names and "w3" not in allowed:
        names = (names - {"w3"}) | {"w3max", "w3rate"}
    unknown = names - set(allowed)
    if unknown or not names:
        raise click.BadParameter(f"{', '.join(sorted(unknown)) or value!r}: choose from {', '.join(allowed)}",
                                 param_hint=what)
    return tuple(n for n in allowed if n in names)


@bench.command("queue")
@click.option("--jobs", type=click.IntRange(100), help="Jobs in W1 and W2 (default 200,000; --quick 10,000).")
@click.option("--seconds", type=click.FloatRange(0.5), help="Length of each W3 run (default 10; --quick 1.5).")
@click.option("--rate", type=click.IntRange(8), default=5000, show_default=True, help="W3 fixed rate, jobs/s.")
@click.option("--reps", type=click.IntRange(1), default=3, show_default=True,
              help="Interleaved repetitions; the table shows medians.")
@click.option("--only", default="w1,w2,w2g,w3max,w3rate", show_default=True,
              help="Workloads: w1, w2, w2g, w3max, w3rate (w3 = both W3).")
@click.option("--class", "classes", default="fsync,memory", show_default=True,
              help="Durability classes: fsync, memory, replicated (fsync with a replica and min-replicas-to-ack 1), "
                   "replicated-async (with a replica, min-replicas-to-ack 0).")
@click.option("--url", help="A running leaseq (redis://[:password@]host:port) instead of starting one per run.")
@click.option("--replica-dir", type=click.Path(file_okay=False, exists=True),
              help="Where the replicated classes' replicas keep their data (another disk, or /dev/shm to leave "
                   "the primary's disk to it alone); default: beside the primary's.")
@click.option("--redis-server", "redis_server", default="redis-server", show_default=True,
              help="The redis-server to compare with; when it is missing, leaseq runs alone.")
@JSON_OPTION
@click.option("--quick", is_flag=True, help="10,000 jobs and 1.5 s W3 runs, for a fast try.")
def bench_queue(jobs, seconds, rate, reps, only, classes, url, replica_dir, redis_server, json_path, quick) -> None:
    """leaseq beside redis-server (streams) at the same durability: produce, consume, mixed at max
    rate and at a fixed rate with push->claim latency."""
    try:
        from leaseq.bench import queue
    except ImportError as e:
        raise click.ClickException(f"{e}: install the bench extra (pip install 'leaseq[bench]')") from None
    if url and (why := queue.check_url(url)):
        raise click.BadParameter(why, param_hint="--url")
    workloads = _names(only, queue.WORKLOADS, "--only")
    durabilities = _names(classes, queue.CLASSES, "--class")
    jobs = jobs or (queue.QUICK_JOBS if quick else queue.DEFAULT_JOBS)
    seconds = seconds or (queue.QUICK_SECONDS if quick else queue.DEFAULT_SECONDS)
    try:
        queue.run(jobs, seconds, rate, reps, workloads, durabilities, url, redis_server, json_path,
                  replica_dir=replica_dir)
    except RuntimeError as e:
        raise click.ClickException(str(e)) from None

