"""The ``leaseq`` data source: a DataFrame's rows become jobs in a queue,
in batch (``df.write``) and Structured Streaming (``df.writeStream``), with
the options docs/spark.md lists (``Options.parse`` reads them; Spark
lower-cases their names).

Each task opens one connection and pushes its partition in batches of
``batchSize`` rows, ``PIPELINE_DEPTH`` QPUSHMANY in flight at once (a
redis-py pipeline).  Rows of a batch that share priority, delay and whether
they have a key go into one QPUSHMANY, which the daemon applies all or none.

Delivery is at least once, as Spark's own: a task that fails after some
batches went out is run again from the start of its partition.  With a key
column the repeated pushes find their jobs (QPUSHMANY ... KEYS ... WHILE
scope) and create nothing.  A daemon's error reply, or a connection that
cannot be made, fails the task with the daemon's own message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterator

from pyspark.sql.datasource import DataSource, DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

PIPELINE_DEPTH = 8          # QPUSHMANY commands in flight per round trip
SCOPES = ("queued", "active", "exists")


class OptionError(ValueError):
    """A writer option is missing or wrong (raised where Spark plans the write)."""


@dataclass
class Pushed(WriterCommitMessage):
    rows: int


@dataclass(frozen=True)
class Options:
    url: str
    queue: str
    payload_column: str = "payload"
    payload_format: str = "raw"
    key_column: str | None = None
    key_scope: str = "exists"
    priority_column: str | None = None
    delay_column: str | None = None
    batch_size: int = 500

    @classmethod
    def parse(cls, options) -> "Options":
        o = {k.lower(): v for k, v in dict(options).items()}
        for required in ("url", "queue"):
            if not o.get(required):
                raise OptionError(f"the leaseq data source needs the option '{required}'")
        if not o["url"].startswith(("redis://", "rediss://")):
            raise OptionError(f"url must start with redis:// or rediss://, not '{o['url']}'")
        fmt = o.get("payloadformat", "raw").lower()
        if fmt not in ("raw", "json"):
            raise OptionError(f"payloadFormat must be raw or json, not '{fmt}'")
        scope = o.get("keyscope", "exists").lower()
        if scope not in SCOPES:
            raise OptionError(f"keyScope must be one of {', '.join(SCOPES)}, not '{scope}'")
        try:
            batch = int(o.get("batchsize", "500"))
        except ValueError:
            raise OptionError(f"batchSize must be an integer, not '{o['batchsize']}'") from None
        if not 1 <= batch <= 100_000:
            raise OptionError(f"batchSize must be between 1 and 100000, not {batch}")
        return cls(o["url"], o["queue"], o.get("payloadcolumn", "payload"), fmt, o.get("keycolumn") or None,
                   scope, o.get("prioritycolumn") or None, o.get("delaycolumn") or None, batch)

    def check_schema(self, schema) -> None:
        names = set(schema.fieldNames())
        wanted = [("keyColumn", self.key_column), ("priorityColumn", self.priority_column),
                  ("delayColumn", self.delay_column)]
        if self.payload_format == "raw":
            wanted.append(("payloadColumn", self.payload_column))
        for option, column in wanted:
            if column is not None and column not in names:
                raise OptionError(f"{option} '{column}' is not a column of the DataFrame "
                                  f"(columns: {', '.join(sorted(names))})")


class LeaseqDataSource(DataSource):
    """``format("leaseq")``: rows into a queue (see the module docstring)."""

    @classmethod
    def name(cls) -> str:
        return "leaseq"

    def writer(self, schema, overwrite: bool) -> "LeaseqWriter":
        options = Options.parse(self.options)
        options.check_schema(schema)
        return LeaseqWriter(options)

    def streamWriter(self, schema, overwrite: bool) -> "LeaseqStreamWriter":
        options = Options.parse(self.options)
        options.check_schema(schema)
        return LeaseqStreamWriter(options)


def push_rows(options: Options, rows: Iterator) -> int:
    """Push every row of one partition; return how many."""
    import redis

    client = redis.Redis.from_url(options.url, socket_timeout=60, socket_connect_timeout=10)
    pipe = client.pipeline(transaction=False)
    batch: list = []
    pushed = 0
    try:
        for row in rows:
            batch.append(_job(options, row))
            if len(batch) >= options.batch_size:
                _queue_batch(options, pipe, batch)
                pushed += len(batch)
                batch = []
                if len(pipe) >= PIPELINE_DEPTH:
                    _send(options, pipe)
        if batch:
            _queue_batch(options, pipe, batch)
            pushed += len(batch)
        _send(options, pipe)
    finally:
        client.close()
    return pushed


def _job(options: Options, row) -> tuple:
    """(payload, key, priority, delay) of one row."""
    values = row.asDict(recursive=True)
    if options.payload_format == "json":
        payload = json.dumps(values, default=str, separators=(",", ":")).encode()
    else:
        payload = _bytes(values.get(options.payload_column), options.payload_column)
    key = None
    if options.key_column is not None:
        raw = values.get(options.key_column)
        key = None if raw is None else _bytes(raw, options.key_column)
    priority = values.get(options.priority_column) if options.priority_column else None
    delay = values.get(options.delay_column) if options.delay_column else None
    return payload, key, priority, delay


def _bytes(value, column: str) -> bytes:
    if value is None:
        raise ValueError(f"column '{column}' is null in a row; every job needs a payload")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    return str(value).encode()


def _queue_batch(options: Options, pipe, batch: list) -> None:
    """One QPUSHMANY per run of rows sharing priority, delay and keyedness."""
    groups: dict = {}
    for payload, key, priority, delay in batch:
        groups.setdefault((priority, delay or 0, key is not None), []).append((payload, key))
    for (priority, delay, keyed), jobs in groups.items():
        args = ["QPUSHMANY", options.queue, len(jobs)] + [p for p, _k in jobs]
        if priority is not None:
            args += ["PRIORITY", priority]
        if delay:
            args += ["DELAY", delay]
        if keyed:
            args += ["KEYS"] + [k for _p, k in jobs] + ["WHILE", options.key_scope]
        pipe.execute_command(*args)


def _send(options: Options, pipe) -> None:
    import redis

    if not len(pipe):
        return
    try:
        replies = pipe.execute(raise_on_error=False)
    except redis.RedisError as e:
        raise RuntimeError(f"cannot push to leaseq at {_where(options.url)}: {e}") from None
    for reply in replies:
        if isinstance(reply, Exception):
            raise RuntimeError(f"leaseq at {_where(options.url)} refused a push into queue "
                               f"'{options.queue}': {_daemon_text(reply)}")


# redis-py turns these codes into exception classes and drops the code word
# from the message; put it back so the task's error reads as the daemon wrote it
_CODES = {"OutOfMemoryError": "OOM", "NoPermissionError": "NOPERM", "BusyLoadingError": "LOADING",
          "ReadOnlyError": "READONLY", "ExecAbortError": "EXECABORT"}


def _daemon_text(error: Exception) -> str:
    text = str(error)
    code = _CODES.get(type(error).__name__)
    return f"{code} {text}" if code and not text.startswith(code) else text


def _where(url: str) -> str:
    """The URL without its password."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.rpartition('@')[2]}"


class LeaseqWriter(DataSourceWriter):
    def __init__(self, options: Options) -> None:
        self.options = options

    def write(self, iterator) -> Pushed:
        return Pushed(push_rows(self.options, iterator))


class LeaseqStreamWriter(DataSourceStreamWriter):
    def __init__(self, options: Options) -> None:
        self.options = options

    def write(self, iterator) -> Pushed:
        return Pushed(push_rows(self.options, iterator))

    def commit(self, messages, batchId) -> None:
        pass

    def abort(self, messages, batchId) -> None:
        pass
