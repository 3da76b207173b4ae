"""The command table: one declarative entry per command.

The dispatcher (arity, flags, handler), ``COMMAND COUNT/INFO/DOCS`` and
``docs/commands.md`` (``render_markdown``) are all derived from ``TABLE``;
``tests/unit/test_table.py`` fails if the committed doc differs.

Arity follows Redis: ``N`` means exactly N arguments including the command
name, ``-N`` at least N.  Flags:

``write``     changes queues or jobs
``readonly``  only reads queues or jobs
``denyoom``   refused with -OOM when maxmemory is exceeded
``blocking``  may wait (QCLAIM BLOCK, QRESULT BLOCK)
``fast``      O(1) or O(log n) in the number of jobs
``admin``     server administration
``noauth``    allowed before authentication
``loading``   allowed while the log is being recovered
``no-multi``  not allowed inside MULTI
``transaction``  MULTI/EXEC/DISCARD: run by the dispatcher itself
``direct``    runs at once even inside MULTI (QUIT, RESET), as in Redis
``pubsub``    allowed on a RESP2 connection that has SUBSCRIBE streams

Each command's ACL categories (``ACL CAT``, ``+@category`` rules) are derived
from its flags and group by ``acl.categories_for``, plus the ``keyspace`` and
``dangerous`` marks given here.  Commands with subcommands list them with
their own extra flags (CLIENT KILL is ``admin``), so a rule can allow one
subcommand (``+client|id``) and a category reaches only the subcommands in it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from . import (
    acl,
    connection,
    debug,
    history,
    inspect,
    jobs,
    keyspace,
    pubsub,
    queues,
    replication,
    results,
    schedules,
    server,
)
from .replies import Map, Simple

SINCE = "0.1.0"


@dataclass(frozen=True)
class Arg:
    name: str
    type: str = "string"           # key | string | integer | pure-token | oneof | block
    token: str | None = None
    optional: bool = False
    multiple: bool = False
    args: tuple = ()

    def syntax(self) -> str:
        if self.type == "pure-token":
            text = self.token
        elif self.type == "oneof":
            text = " | ".join(a.syntax() for a in self.args)
            if self.token:
                text = f"{self.token} {text}"
        elif self.type == "block":
            text = " ".join(a.syntax() for a in self.args)
            if self.token:
                text = f"{self.token} {text}"
        elif self.token and self.multiple:
            text = f"{self.token} {self.name} [{self.name} ...]"
        else:
            text = f"{self.token} {self.name}" if self.token else self.name
        if self.multiple and not self.token:
            text = f"{text} [{text} ...]"
        if self.optional:
            text = f"[{text}]"
        elif self.type == "oneof":
            text = f"<{text}>"
        return text

    def doc(self) -> Map:
        items = [(b"name", self.name.encode()), (b"type", self.type.encode())]
        if self.token:
            items.append((b"token", self.token.encode()))
        # Redis sends these flags as status replies; redis-cli asserts on that
        flags = [Simple(f) for f, on in (("optional", self.optional), ("multiple", self.multiple)) if on]
        if flags:
            items.append((b"flags", flags))
        if self.args:
            items.append((b"arguments", [a.doc() for a in self.args]))
        return Map(items)


def opt(token: str, name: str | None = None, type: str = "integer") -> Arg:
    """An optional ``TOKEN value`` argument (or a pure token when ``name`` is None)."""
    if name is None:
        return Arg(token.lower(), "pure-token", token=token, optional=True)
    return Arg(name, type, token=token, optional=True)


QUEUE = Arg("queue", "key")
TOKENS = Arg("token", multiple=True)


@dataclass(frozen=True)
class Subcommand:
    name: str                      # lower case, as in ``client|kill``
    categories: frozenset


@dataclass(frozen=True)
class Command:
    name: str
    handler: Callable | None
    arity: int
    flags: frozenset
    group: str
    summary: str
    complexity: str = "O(1)"
    args: tuple = ()
    first_key: int = 0
    reply: str = ""
    notes: str = ""
    subcommands: tuple = field(default=())     # Subcommand
    categories: frozenset = frozenset()
    last_key: int = 0               # as Redis: the last key's position; -1 = every argument from first_key
    access: str = ""                # what it does to the queue it names: R, W or RW (ACL %R~ / %W~)
    observes: str = ""              # what its reply may show, so waits to be on disk (``_c``)

    def syntax(self) -> str:
        return " ".join([self.name.upper()] + [a.syntax() for a in self.args])


def _c(name, handler, arity, flags, group, summary, args=(), complexity="O(1)", reply="", notes="",
       subcommands="", categories="", access="", first_key=None, observes=""):
    """One command.  ``subcommands``: "name name:flag,flag ..." (extra flags
    per subcommand); ``categories``: extra ACL categories (keyspace,
    dangerous); ``access``: RW for a command that writes a queue and hands out
    its payloads (otherwise R for readonly, W for write commands);
    ``first_key``: where the queue is when it is not the first argument;
    ``observes``: "queues" when its reply may show the queues though it is
    neither readonly nor write (every readonly and write command's may):
    such a reply leaves only once what it may show is in the log as its
    writer's reply needed; "claims" when it shows only the jobs it claims,
    which need not wait for the fsync of acks no claim can see yet
    (docs/semantics.md §5.2)."""
    if first_key is None:
        first_key = 1 if args and args[0].type == "key" else 0
    last_key = -1 if args and args[0].type == "key" and args[0].multiple else first_key
    flag_set = frozenset(flags.split())
    extra = tuple(categories.split())
    subs = []
    for word in subcommands.split():
        sub, _, sub_flags = word.partition(":")
        subs.append(Subcommand(sub, acl.categories_for(flag_set | frozenset(sub_flags.split(",")) - {""}, group,
                                                       bool(first_key), extra)))
    access = access or ("R" if "readonly" in flag_set else "W" if "write" in flag_set else "RW")
    return Command(name, handler, arity, flag_set, group, summary, complexity, tuple(args),
                   first_key, reply, notes, tuple(subs), acl.categories_for(flag_set, group, bool(first_key), extra),
                   last_key, access, observes or ("queues" if flag_set & {"readonly", "write"} else ""))


QUEUE_OPTIONS = (
    opt("LEASE", "ms"),
    opt("MAXDELIVERIES", "n"),
    opt("DEADLETTER", "queue", "key"),
    Arg("backoff", "block", token="BACKOFF", optional=True,
        args=(Arg("base-ms", "integer"), Arg("exponent"), Arg("jitter-ms", "integer"))),
    opt("MAXLEN", "n"),
    opt("EXPIRE", "ms"),
    opt("RETAIN-COMPLETED", "ms"),
    opt("RETAIN-DEAD", "ms"),
    opt("RESULT-TTL", "ms"),
    opt("WINDOW", "ms"),
    Arg("durability", "oneof", token="DURABILITY", optional=True,
        args=(Arg("fsync", "pure-token", token="fsync"), Arg("async", "pure-token", token="async"),
              Arg("memory", "pure-token", token="memory"))),
    Arg("rate", "block", token="RATE", optional=True, args=(Arg("n", "integer"), Arg("ms", "integer"))),
    opt("CONCURRENCY", "n"),
    opt("GROUP-CONCURRENCY", "n"),
    Arg("group-rate", "block", token="GROUP-RATE", optional=True, args=(Arg("n", "integer"), Arg("ms", "integer"))),
)

WHEN = Arg("when", "oneof", optional=True, args=(Arg("ms", "integer", token="DELAY"),
                                                 Arg("ms-epoch", "integer", token="AT")))
SCOPE = Arg("scope", "oneof", token="WHILE", optional=True,
            args=(Arg("queued", "pure-token", token="queued"), Arg("active", "pure-token", token="active"),
                  Arg("exists", "pure-token", token="exists")))
AFTER = Arg("after", "block", token="AFTER", optional=True,
            args=(Arg("count", "integer"), Arg("parent", "block", multiple=True,
                                               args=(Arg("queue", "key"), Arg("id", "integer")))))
ONFAIL = Arg("onfail", "oneof", token="ONFAIL", optional=True,
             args=(Arg("run", "pure-token", token="run"), Arg("fail", "pure-token", token="fail")))
JOB_LIMITS = (opt("MAXDELIVERIES", "n"), opt("EXPIRE", "ms"), AFTER, ONFAIL)
META = Arg("meta", "block", token="META", optional=True,       # (last: its pairs run to the end)
           args=(Arg("pair", "block", multiple=True, args=(Arg("field"), Arg("value"))),))
REPLACE = opt("REPLACE")
PUSH_OPTIONS = (opt("PRIORITY", "p"), WHEN,
                Arg("dedupe", "block", optional=True, args=(Arg("key", token="KEY"), SCOPE, REPLACE))) + JOB_LIMITS + (
                opt("GROUP", "group", "string"), META)
PUSHMANY_OPTIONS = (opt("PRIORITY", "p"), WHEN,
                    Arg("dedupe", "block", optional=True,
                        args=(Arg("key", token="KEYS", multiple=True), SCOPE, REPLACE))) + JOB_LIMITS + (
                    Arg("groups", "oneof", optional=True,
                        args=(Arg("group", "string", token="GROUP"),
                              Arg("group", "string", token="GROUPS", multiple=True))), META)
GROUP_ARG = opt("GROUP", "group", "string")
PRIMARY = (Arg("args", "oneof", args=(Arg("host-port", "block", args=(Arg("host"), Arg("port", "integer"))),
                                      Arg("no-one", "block", args=(Arg("no", "pure-token", token="NO"),
                                                                   Arg("one", "pure-token", token="ONE"))))),)

_COMMANDS = [
    # -- queues --------------------------------------------------------------------------------
    _c("qcreate", queues.qcreate, -2, "write denyoom", "queue",
       "Create a queue with options; idempotent for the same configuration",
       (QUEUE,) + QUEUE_OPTIONS, reply="+OK, or -EXISTS if the queue exists with another configuration",
       categories="keyspace"),
    _c("qalter", queues.qalter, -2, "write", "queue", "Change options of an existing queue",
       (QUEUE,) + QUEUE_OPTIONS, reply="+OK",
       notes="DURABILITY cannot change between memory and fsync/async.", categories="keyspace"),
    _c("qdrop", queues.qdrop, -2, "write", "queue", "Delete a queue and, with FORCE, its jobs",
       (QUEUE, opt("FORCE")), "O(N) in jobs",
       reply="integer: jobs removed; -NOTEMPTY if it has jobs and FORCE is not given",
       notes="FORCE ends every lease and wakes blocked claimers with -CLOSED.", categories="keyspace dangerous"),
    _c("qlist", queues.qlist, -1, "readonly", "queue", "List queue names in ascending order",
       (opt("MATCH", "glob", "string"), opt("AFTER", "name", "string"), opt("COUNT", "n")), "O(N) in queues",
       reply="array of names, at most COUNT (default 100, max 1000), after AFTER", categories="keyspace"),
    _c("qinfo", queues.qinfo, 2, "readonly", "queue", "Configuration and counters of a queue", (QUEUE,),
       reply="map: name, every option, ready, delayed, in_flight, dead, completed, pushed, acked, nacked, "
             "lease_expired, dead_lettered, duplicates, oldest_ready_age_ms, consumers_blocked, next_id, "
             "throttled (ready jobs a claim could not take now: RATE, CONCURRENCY or a pause)"),
    _c("qhistory", history.qhistory, -2, "readonly", "queue", "A queue's history: counts, wait and run "
       "percentiles and depth, one map per minute", (QUEUE, opt("FROM", "ms-epoch"), opt("TO", "ms-epoch")),
       "O(log N + M) in kept minutes",
       reply="array of maps, oldest first: minute (ms epoch), pushed, claimed, acked, nacked, dead, cancelled, "
             "expired, wait_p50, wait_p95, wait_p99 (push to first claim, ms), run_p50, run_p95, run_p99 (claim to "
             "ack, ms), ready, in_flight (at the minute's end); -NOQUEUE if the queue neither exists nor has history",
       notes="FROM (default 0) and TO (default now) are both included; FROM after TO gives an empty array. "
             "Minutes are kept for history-hours (72); a minute with no job and no change is not kept."),
    _c("qpause", queues.qpause, -2, "write fast", "queue",
       "Stop handing out jobs of a queue, or of one group of it, until QRESUME",
       (QUEUE, GROUP_ARG), reply="+OK; -NOQUEUE if the queue does not exist",
       notes="Pushes, acks, nacks and extends go on; blocked claimers wait. The pause lasts across restarts."),
    _c("qresume", queues.qresume, -2, "write fast", "queue",
       "Hand out jobs of a paused queue, or of a paused group, again",
       (QUEUE, GROUP_ARG), reply="+OK; -NOQUEUE if the queue does not exist",
       notes="Blocked claimers and work streams are served at once. Without GROUP only the queue's own pause "
             "is lifted, not its groups'."),
    _c("qlen", queues.qlen, 2, "readonly fast", "queue", "Number of jobs ready to be claimed now", (QUEUE,),
       reply="integer"),
    # -- schedules ----------------------------------------------------------------------------------
    _c("qschedule", schedules.qschedule, -6, "write denyoom", "queue",
       "Create or replace a schedule that pushes a job onto the queue at each tick",
       (QUEUE, Arg("name"), Arg("payload"),
        Arg("when", "oneof", args=(Arg("cron", "block", token="CRON",
                                       args=(Arg("expr"), opt("TZ", "zone", "string"))),
                                   Arg("ms", "integer", token="EVERY"))),
        opt("PRIORITY", "p"),
        Arg("misfire", "oneof", token="MISFIRE", optional=True,
            args=(Arg("skip", "pure-token", token="skip"), Arg("once", "pure-token", token="once"),
                  Arg("all", "pure-token", token="all"))),
        Arg("overlap", "oneof", token="OVERLAP", optional=True,
            args=(Arg("allow", "pure-token", token="allow"), Arg("skip", "pure-token", token="skip"))), META),
       "O(log S) for S schedules",
       reply="integer: the next tick (ms epoch); the same definition again changes nothing",
       notes="Each tick pushes one job carrying schedule and tick (and the schedule's META), in the same log "
             "record as the schedule's advance: a crash neither repeats nor loses a tick. META comes last."),
    _c("qunschedule", schedules.qunschedule, 3, "write fast", "queue", "Delete a schedule",
       (QUEUE, Arg("name")), reply="integer: 1 if the schedule existed, else 0"),
    _c("qschedules", schedules.qschedules, 2, "readonly", "queue", "The schedules of a queue", (QUEUE,),
       "O(S)", reply="array of maps: name, spec, next, last, fired, skipped, misfire, overlap, priority, payload, "
                     "and meta when the schedule has META"),
    # -- jobs ---------------------------------------------------------------------------------------
    _c("qpush", jobs.qpush, -3, "write denyoom fast", "job", "Push a job onto a queue",
       (QUEUE, Arg("payload")) + PUSH_OPTIONS, "O(log N)",
       reply="integer: the job id (with KEY, the id of the job already holding the key in the WHILE scope); "
             "-FULL at MAXLEN; -TOOBIG above max-payload",
       notes="WHILE defaults to queued. META (at most 32 fields, names of 1 to 64 bytes, 8 KiB in all) comes "
             "last: its field value pairs run to the end of the command. Creates the queue when auto-create is yes."),
    _c("qpushmany", jobs.qpushmany, -4, "write denyoom", "job",
       "Push several jobs at once, all or none, in one log write",
       (QUEUE, Arg("count", "integer"), Arg("payload", multiple=True)) + PUSHMANY_OPTIONS, "O(M log N)",
       reply="array of job ids, one per payload (existing ids for dedupe keys already held)",
       notes="KEYS takes exactly count keys, one per payload. META, last, gives every job the same fields."),
    _c("qclaim", jobs.qclaim, -3, "write blocking", "job", "Claim jobs under a lease, optionally waiting",
       (QUEUE, Arg("consumer"), opt("COUNT", "n"), opt("LEASE", "ms"), opt("BLOCK", "ms"), opt("SESSION"),
        opt("COMPACT")),
       "O(M log N)",
       reply="array of job maps (id, payload, lease, deadline, deliveries, priority, enqueued_at, "
             "key, last_error, dead_letter_* provenance, and dead_letter_parent, [queue, id], for a job that died "
             "with its parent, meta for a job pushed with META); empty when nothing was claimable. With COMPACT, each job is an array of the "
             "values of its first seven fields, in that order, without their names, followed by a map of its "
             "other fields only when it has any",
       notes="BLOCK 0 waits forever. SESSION: the leases go back to ready when this connection closes. "
             "With a queue WINDOW, a claim that finds jobs waits up to WINDOW ms to share them with the "
             "claims that arrive meanwhile. Creates the queue when auto-create is yes.", access="RW",
       observes="claims"),
    _c("qwork", jobs.qwork, -3, "write", "job",
       "Push mode: keep up to MAX jobs leased to this connection, sent as push messages",
       (QUEUE, Arg("consumer"), opt("MAX", "n"), opt("LEASE", "ms")), "O(M log N)",
       reply="+OK; then each job arrives as a push message [\"job\", queue, job map] (RESP3 push, RESP2 array)",
       notes="QACK/QNACK (here or on another connection) make room for the next job. The leases go back to "
             "ready when this connection closes.", access="RW"),
    _c("subscribe", pubsub.subscribe, -2, "write pubsub no-multi", "job",
       "QWORK through pub/sub: each job comes as a message on a channel named by the QWORK request; "
       "any other channel is a plain one (PUBLISH)",
       (Arg("channel", multiple=True),), "O(M log N)",
       reply='per channel ["subscribe", channel, streams]; then each job as ["message", channel, job as JSON]',
       notes='A work channel is "QWORK queue consumer [MAX n] [LEASE ms]"; the stream is QWORK\'s '
             '(docs/semantics.md §3.3; -READONLY on a replica). On RESP2 only SUBSCRIBE, UNSUBSCRIBE, PING, '
             'QUIT and RESET are allowed meanwhile.'),
    _c("publish", pubsub.publish, 3, "fast loading", "connection",
       "Send a message to the subscribers of a plain channel (not kept: those subscribed now get it)",
       (Arg("channel"), Arg("message")), "O(N)", reply="integer: the connections that received it",
       notes="Allowed on a replica: Redis Sentinel finds its peers through __sentinel__:hello."),
    _c("unsubscribe", pubsub.unsubscribe, -1, "write pubsub no-multi", "job",
       "End work streams started by SUBSCRIBE; their leases go back to ready",
       (Arg("channel", optional=True, multiple=True),), "O(M log N)",
       reply='per channel ["unsubscribe", channel, streams left]'),
    _c("qack", jobs.qack, -3, "write fast", "job", "Complete jobs by their lease tokens",
       (QUEUE, TOKENS, opt("RESULT", "value", "string")), "O(M log N)",
       reply="integer: jobs completed; stale tokens are skipped",
       notes="RESULT (with exactly one token) keeps the value as the job's result for the queue's RESULT-TTL "
             "(default one hour), for QRESULT and QGET; written in the ack's transaction."),
    _c("qnack", jobs.qnack, -3, "write", "job", "Release jobs back to the queue, after a delay",
       (QUEUE, TOKENS, opt("DELAY", "ms"), opt("ERROR", "message", "string"), opt("DEAD")), "O(M log N)",
       reply="integer: jobs released (or, with DEAD, dead-lettered)",
       notes="Without DELAY the queue's BACKOFF applies; DELAY 0 makes them ready at once; DEAD dead-letters "
             "them now (reason nack)."),
    _c("qprogress", jobs.qprogress, 4, "write fast", "job", "Report a leased job's progress",
       (QUEUE, Arg("token"), Arg("value")),
       reply="integer: 1, or 0 when the token is stale",
       notes="QGET, QPEEK and QSCAN show the latest value as progress; it does not extend the lease. "
             "At most 64 KiB."),
    _c("qresult", results.qresult, -3, "readonly blocking", "job", "A job's result, or why it died",
       (QUEUE, Arg("id", "integer"), opt("BLOCK", "ms")),
       reply="bulk string: the result; nil while the job has not ended (BLOCK ms waits for its end, 0 for "
             "ever, then nil); -DEAD reason if it died or was cancelled; -NOJOB if unknown, expired, or acked "
             "without a result",
       notes="Results and deaths are kept for the queue's RESULT-TTL; a blocked QRESULT is answered in the "
             "event-loop turn after the ack."),
    _c("qcancel", results.qcancel, -3, "write", "job", "End jobs now, in state cancelled",
       (QUEUE, Arg("id", "integer", multiple=True)), "O(M log N)",
       reply="integer: jobs cancelled (ready, delayed, waiting or in flight); ended and unknown ids count 0",
       notes="A lease on a cancelled job is over: QEXTEND answers nil, QACK counts 0. Cancelled jobs are kept "
             "like dead ones (RETAIN-DEAD); jobs waiting on them (AFTER) die with reason parent-failed unless "
             "ONFAIL run."),
    _c("qextend", jobs.qextend, -3, "write fast", "job", "Set a new lease deadline: now + LEASE",
       (QUEUE, TOKENS, opt("LEASE", "ms")), "O(M log N)",
       reply="array: per token, the new deadline (ms epoch) or nil if the token is stale"),
    # -- inspection and repair ---------------------------------------------------------------------
    _c("qget", inspect.qget, 3, "readonly fast", "inspect", "Inspect one job by id", (QUEUE, Arg("id", "integer")),
       reply="job map with state (delayed, ready, in_flight, dead, completed, waiting, cancelled) and, when "
             "acked with RESULT, result; an acked job gone whose result is still kept: id, state, result, "
             "result_until; else nil"),
    _c("qpeek", inspect.qpeek, -2, "readonly", "inspect", "The next ready jobs in claim order, not leased",
       (QUEUE, opt("COUNT", "n")), "O(M log N)", reply="array of job maps (COUNT default 1, max 1000)"),
    _c("qscan", inspect.qscan, -3, "readonly", "inspect", "Iterate over every job, SCAN style, with filters",
       (QUEUE, Arg("cursor", "integer"), opt("STATE", "state", "string"), opt("MATCH", "glob", "string"),
        Arg("meta", "block", token="META", optional=True, args=(Arg("field"), Arg("glob"))),
        opt("ERROR", "glob", "string"), opt("COUNT", "n")), "O(COUNT)",
       reply="[next cursor, [job map ...]]; cursor 0 starts and ends the scan",
       notes="Every job present for the whole scan is returned exactly once; COUNT (default 10) is how many "
             "jobs are looked at per call, so with filters a call may return fewer jobs, or none, with a "
             "cursor to go on from. MATCH is a glob (as KEYS's) on the payload, META field glob on that META "
             "field (a job without it does not match), ERROR glob on last_error (a job with none does not "
             "match); every filter given must hold, options in any order; a glob is at most 1024 bytes."),
    _c("qdel", inspect.qdel, -3, "write", "inspect", "Remove jobs by id, whatever their state",
       (QUEUE, Arg("id", "integer", multiple=True)), "O(M log N)",
       reply="integer: jobs removed (their leases become stale)"),
    _c("qpurge", inspect.qpurge, -2, "write", "inspect", "Remove the jobs in the given states",
       (QUEUE, opt("READY"), opt("DELAYED"), opt("DEAD"), opt("COMPLETED"), opt("WAITING"), opt("CANCELLED"),
        opt("ALL")), "O(N)",
       reply="integer: jobs removed", notes="No state means READY and DELAYED; in-flight jobs only with ALL.",
       categories="dangerous"),
    _c("qredrive", inspect.qredrive, -2, "write", "inspect",
       "Dead jobs back to ready; a dead-letter queue's jobs back to their source queues",
       (QUEUE, Arg("which", "oneof", optional=True, args=(Arg("n", "integer", token="COUNT"),
                                                          Arg("id", "integer", token="ID", multiple=True)))),
       "O(M log N)",
       reply="integer: jobs moved (deliveries reset to 0)",
       notes="Without COUNT or ID, all of them; ID moves only the jobs named (every argument after ID is an "
             "id; those that are not dead letters count nothing)."),
    # -- Redis's keyspace commands, for the tools that walk it -------------------------------------
    _c("scan", keyspace.scan, -2, "readonly", "keyspace", "Iterate over queue names, as Redis's SCAN iterates keys",
       (Arg("cursor", "integer"), opt("MATCH", "pattern", "string"), opt("COUNT", "count"),
        opt("TYPE", "type", "string")), "O(N) in queues per call",
       reply="[next cursor, [name ...]]; cursor 0 starts and ends the scan",
       notes="Every queue that exists for the whole scan is returned exactly once. Every key is of TYPE queue.",
       categories="keyspace"),
    _c("keys", keyspace.keys, 2, "readonly", "keyspace", "Queue names matching a glob pattern",
       (Arg("pattern"),), "O(N) in queues", reply="array of names", categories="keyspace dangerous"),
    _c("exists", keyspace.exists, -2, "readonly fast", "keyspace", "How many of the given queues exist",
       (Arg("key", "key", multiple=True),), "O(N) in keys", reply="integer", categories="keyspace"),
    _c("type", keyspace.type_, 2, "readonly fast", "keyspace", "The type of a key: queue, or none",
       (Arg("key", "key"),), reply="+queue or +none", categories="keyspace"),
    _c("memory", keyspace.memory, -2, "readonly", "keyspace",
       "MEMORY USAGE: the estimated bytes a queue holds; MEMORY HELP",
       (Arg("subcommand"), Arg("key", optional=True), opt("SAMPLES", "count")), "O(1)",
       reply="integer (nil for a queue that does not exist)", first_key=2, subcommands="usage help"),
    _c("object", keyspace.object_, -2, "readonly", "keyspace",
       "OBJECT FREQ: how busy a queue is, for redis-cli --hotkeys; OBJECT HELP",
       (Arg("subcommand"), Arg("key", optional=True)), "O(1)",
       reply="integer 0-255 (nil for a queue that does not exist)", first_key=2, subcommands="freq help"),
    # -- connection -----------------------------------------------------------------------------
    _c("ping", connection.ping, -1, "fast noauth pubsub", "connection", "Ping the server",
       (Arg("message", optional=True),), reply="+PONG, or the message"),
    _c("echo", connection.echo, 2, "fast", "connection", "Return the given string",
       (Arg("message"),), reply="bulk string"),
    _c("hello", connection.hello, -1, "fast noauth loading no-multi", "connection",
       "Handshake: choose RESP2 or RESP3, authenticate, name the connection",
       (Arg("arguments", "block", optional=True, args=(
           Arg("protover", "integer"),
           Arg("auth", "block", token="AUTH", optional=True,
               args=(Arg("username"), Arg("password"))),
           Arg("clientname", token="SETNAME", optional=True))),),
       reply="map: server, version, proto, id, mode, role, modules"),
    _c("auth", connection.auth, -2, "fast noauth loading no-multi", "connection", "Authenticate the connection",
       (Arg("username", optional=True), Arg("password")), reply="+OK or -WRONGPASS"),
    _c("select", connection.select, 2, "fast loading", "connection", "Select database 0 (the only one)",
       (Arg("index", "integer"),), reply="+OK for 0, an error otherwise"),
    _c("quit", connection.quit_, -1, "fast noauth loading direct pubsub", "connection", "Close the connection", (),
       reply="+OK, then the server closes the connection"),
    _c("reset", connection.reset, 1, "fast noauth loading direct pubsub", "connection",
       "Reset the connection: RESP2, no name, unauthenticated, no transaction", reply="+RESET"),
    _c("client", connection.client_cmd, -2, "loading", "connection",
       "Connection commands: ID, GETNAME, SETNAME, SETINFO, INFO, LIST, KILL, PAUSE, UNPAUSE, NO-EVICT, NO-TOUCH, "
       "MAINT_NOTIFICATIONS, GETREDIR, HELP",
       (Arg("subcommand"), Arg("arg", optional=True, multiple=True)), "O(N) in clients for LIST and KILL",
       reply="depends on the subcommand",
       subcommands="id getname setname setinfo info list:admin kill:admin pause:admin unpause:admin help "
                   "no-evict:admin no-touch maint_notifications getredir"),
    _c("multi", None, 1, "fast loading transaction", "transactions", "Start a transaction",
       reply="+OK; the following commands answer +QUEUED"),
    _c("exec", None, 1, "loading transaction", "transactions",
       "Run the queued commands atomically, in one log write",
       reply="array of the replies; -EXECABORT if a command failed to queue", observes="queues"),
    _c("discard", None, 1, "fast loading transaction", "transactions", "Discard the queued commands",
       reply="+OK"),
    _c("watch", connection.watch, -2, "fast no-multi", "transactions", "Not supported (always an error)",
       (Arg("key", "key", multiple=True),), reply="an error: MULTI/EXEC is always atomic in leaseq"),
    _c("unwatch", connection.unwatch, 1, "fast", "transactions", "Accepted for compatibility", reply="+OK"),
    # -- server ---------------------------------------------------------------------------------------
    _c("command", server.command_cmd, -1, "loading", "server",
       "Describe leaseq's commands: COUNT, DOCS, INFO, LIST",
       (Arg("subcommand", optional=True), Arg("command-name", optional=True, multiple=True)), "O(N)",
       reply="depends on the subcommand", subcommands="count docs info list getkeys help"),
    _c("info", server.info, -1, "loading", "server",
       "Server information: server, clients, memory, persistence, stats, queues",
       (Arg("section", optional=True, multiple=True),), reply="text (bulk; verbatim in RESP3)",
       categories="dangerous", observes="queues"),
    _c("config", server.config_cmd, -2, "admin loading", "server", "CONFIG GET, SET and RESETSTAT",
       (Arg("subcommand"), Arg("arg", optional=True, multiple=True)), reply="map for GET, +OK for SET",
       subcommands="get set resetstat rewrite help"),
    _c("time", server.time_cmd, 1, "fast loading", "server", "The server's time",
       reply="array: seconds, microseconds"),
    _c("dbsize", server.dbsize, 1, "readonly fast", "server", "Number of queues", reply="integer",
       categories="keyspace"),
    _c("debug", debug.debug, -2, "admin", "server",
       "Test helpers (only with enable-debug-command yes): CLOCK [ADVANCE ms | FREEZE [ms] | RESUME], "
       "FAULT [WRITE|FSYNC|RESERVE ENOSPC|EIO|NONE | SLOW ms], SLEEP seconds",
       (Arg("subcommand"), Arg("arg", optional=True, multiple=True)),
       reply="depends on the subcommand", notes="Refused unless the server runs with enable-debug-command yes.",
       subcommands="clock fault sleep"),
    _c("acl", acl.acl_cmd, -2, "loading", "server",
       "Users and permissions: WHOAMI, USERS, LIST, CAT, HELP (users are declared in the config file)",
       (Arg("subcommand"), Arg("arg", optional=True, multiple=True)), "O(N) in users or commands",
       reply="depends on the subcommand", subcommands="whoami cat help list:admin users:admin"),
    _c("bgsave", server.bgsave, -1, "admin no-multi", "server",
       "Write a snapshot now, in the background (the log before it is then compacted)",
       (opt("SCHEDULE"),),
       reply="+Background saving started, or +Background saving scheduled with SCHEDULE while one runs",
       notes="Without SCHEDULE, an error while a snapshot is being written."),
    _c("slowlog", server.slowlog, -2, "admin loading", "server",
       "The slow log, as Redis's: GET [count] (10; -1: all), LEN, RESET, HELP",
       (Arg("subcommand"), Arg("count", "integer", optional=True)),
       reply="GET: [[id, unix time, microseconds, [arguments], client address, client name], ...] newest first; "
             "LEN: integer; RESET: +OK",
       notes="Commands whose own run took slowlog-log-slower-than microseconds (10000) or more, the newest "
             "slowlog-max-len (128); passwords redacted (docs/operations.md).",
       subcommands="get len reset help"),
    _c("lastsave", server.lastsave, 1, "fast loading", "server", "Unix time of the last snapshot written",
       reply="integer (0 before the first)"),
    _c("shutdown", server.shutdown, -1, "admin loading no-multi", "server",
       "Stop gracefully: answer what was received, fsync, exit",
       (Arg("mode", optional=True),), reply="nothing: the connection closes"),
    _c("replicaof", replication.replicaof, 3, "admin", "replication",
       "Follow the primary at host port as its replica, or with NO ONE become a primary", PRIMARY,
       reply="+OK (+OK Already connected to specified master when it follows that one already)",
       notes="A replica answers reads; commands that write, claim or stream jobs get -READONLY. "
             "Promotion starts a new replication id and boot epoch (docs/replication.md)."),
    _c("slaveof", replication.replicaof, 3, "admin", "replication", "REPLICAOF, by its older name (Sentinel sends it)",
       PRIMARY, reply="as REPLICAOF"),
    _c("role", replication.role, 1, "fast loading", "replication", "This node's role in replication, as Redis's ROLE",
       reply="primary: [master, offset, [[ip, port, offset], ...]]; replica: [slave, host, port, state, offset]"),
    _c("replconf", replication.replconf, -1, "admin loading", "replication",
       "What a replica tells its primary: listening-port, ip-address, capa, ack offset, getack",
       (Arg("option", multiple=True), ), reply="+OK; nothing for ACK and GETACK"),
    _c("wait", replication.wait, 3, "blocking", "replication",
       "Wait until numreplicas replicas acknowledged everything this node wrote so far, or timeout ms (0: no limit)",
       (Arg("numreplicas", "integer"), Arg("timeout", "integer")),
       reply="integer: the replicas that acknowledged it (when the timeout ran out, maybe fewer)",
       notes="Inside MULTI it answers at once. A replica acknowledges after each fsync, so the count is of "
             "replicas that have it on disk. On a replica: an error."),
    _c("waitaof", replication.waitaof, 4, "blocking", "replication",
       "Wait until this node's log has fsynced everything it wrote so far (numlocal 1) and numreplicas replicas "
       "have it on their disks, or timeout ms (0: no limit)",
       (Arg("numlocal", "integer"), Arg("numreplicas", "integer"), Arg("timeout", "integer")),
       reply="array: [1 if this node's fsync covers it, else 0; the replicas that have it on their disks]",
       notes="As Redis 7.2's, the log standing for the append-only file: the fsync is asked for at once, not at "
             "the next fsync-interval. Inside MULTI it answers at once. On a replica: an error."),
    _c("psync", replication.psync, -3, "admin no-multi", "replication",
       "A replica asks for the stream from an offset of a history (? -1: from the start)",
       (Arg("replicationid"), Arg("offset", "integer"), opt("FAILOVER")),
       reply="+CONTINUE replid then the stream, or +FULLRESYNC replid offset, the snapshot, then the stream",
       notes="FAILOVER: sent by this replica's primary during FAILOVER; the replica promotes itself first."),
    _c("failover", replication.failover, -1, "admin no-multi", "replication",
       "Hand this primary's role to a replica: writes wait until it has everything, it is promoted, "
       "this node follows it",
       (Arg("target", "block", token="TO", optional=True, args=(Arg("host"), Arg("port", "integer"), opt("FORCE"))),
        opt("ABORT"), opt("TIMEOUT", "milliseconds")),
       reply="+OK once it started (INFO replication master_failover_state says where it is)",
       notes="As Redis 7's coordinated failover; not under Sentinel (leaseq switchover does it through "
             "Sentinel). docs/replication.md."),
]

TABLE: dict[bytes, Command] = {c.name.encode(): c for c in _COMMANDS}


# -- COMMAND INFO / DOCS ----------------------------------------------------------------------

def command_info(c: Command) -> list:
    """Redis 7's 10-element COMMAND INFO entry."""
    return [c.name.encode(), c.arity, [Simple(f) for f in sorted(c.flags)], c.first_key, c.last_key,
            1 if c.first_key else 0, [Simple("@" + cat) for cat in sorted(c.categories)], [], [], []]


def command_docs(c: Command) -> Map:
    items = [(b"summary", c.summary.encode()), (b"since", SINCE.encode()), (b"group", c.group.encode()),
             (b"complexity", c.complexity.encode())]
    if c.args:
        items.append((b"arguments", [a.doc() for a in c.args]))
    return Map(items)


GROUPS = [("queue", "Queues"), ("job", "Jobs"), ("inspect", "Inspection and repair"),
          ("keyspace", "Keyspace (for Redis tools)"), ("connection", "Connection"),
          ("transactions", "Transactions"), ("server", "Server"), ("replication", "Replication")]


def render_markdown() -> str:
    """``docs/commands.md``: generated from TABLE (``leaseq docs``)."""
    out = ["# leaseq commands", "",
           "<!-- Generated from commands/table.py by `leaseq docs`; do not edit by hand. -->", "",
           "Syntax in Redis documentation style: `[x]` optional, `a | b` one of, `x [x ...]` one or more. "
           "Command names and option keywords are case-insensitive. Times are integer milliseconds. "
           "Errors are listed in [errors.md](errors.md).", ""]
    for group, title in GROUPS:
        out += [f"## {title}", ""]
        for c in _COMMANDS:
            if c.group != group:
                continue
            arity = f"exactly {c.arity}" if c.arity > 0 else f"at least {-c.arity}"
            out += [f"### {c.name.upper()}", "", "```", c.syntax(), "```", "", c.summary + ".", ""]
            if c.reply:
                out += [f"- Reply: {c.reply}."]
            cats = " ".join("@" + cat for cat in sorted(c.categories))
            out += [f"- Complexity: {c.complexity}.",
                    f"- Arity: {arity} arguments (with the name); flags: {', '.join(sorted(c.flags))}.",
                    f"- ACL categories: {cats}."]
            if c.subcommands:
                out += ["- Subcommands and their categories: " + "; ".join(
                    f"`{c.name}|{sub.name}` " + " ".join("@" + cat for cat in sorted(sub.categories))
                    for sub in c.subcommands) + "."]
            if c.notes:
                out += [f"- {c.notes}"]
            out.append("")
    return "\n".join(out).rstrip() + "\n"
