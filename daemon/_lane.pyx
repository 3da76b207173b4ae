# cython: language_level=3
"""The plain lane: ``daemon.dispatch.execute`` for the three commands of a
job's life (QPUSH, QCLAIM, QACK) in their plain forms, compiled
(docs/performance.md, "The plain lane").

A worker's job is three requests, and at one job per request the checks and
the bookkeeping around each handler cost more than the handler's own work.
Here they are one C function: the command's name is matched in C, the
checks of ``dispatch._execute`` are read off the client and the server once,
and the work goes straight to the store: ``storage.plain``'s
``push_one``, ``claim_next`` and ``ack_tokens`` as C calls (storage/plain.py,
compiled as it is), so what a command does to the queues is written once.

``run(client, args)`` answers what ``execute`` answers, ``(reply, ticket)``,
or None when the command is not plain.  None is decided before anything
changes, and then ``execute`` runs the command the ordinary way: so every
error, every option and every feature of a queue stays there.  Plain is:

* QPUSH queue payload: no options, the queue exists and has no MAXLEN, the
  payload within ``proto-max-payload``;
* QCLAIM queue consumer [COUNT n] [BLOCK ms] [LEASE ms]: good options, no
  SESSION, the queue exists and has no WINDOW;
* QACK queue token [token ...]: the queue exists and no argument is
  RESULT in any case (a token is hex digits and dots: it may start with a
  letter, ``a.1.5``, but never spells a keyword);

and the client may run everything (an unrestricted user, authenticated,
not in MULTI, not in the RESP2 pub/sub context), the store is loaded, the
log can be written, and, for QPUSH, memory is not over ``maxmemory``.
The names, arity and what the reply observes come from
``commands.table.TABLE``, as for every command; tests/unit/test_lane.py
runs generated command sequences with and without the lane and holds them
to the same replies, tickets, counters, records and store.

It reads the server and the store at their slots' offsets (``Slots``,
storage/_slots.pxi).  The connection's turn that asks it (through
``dispatch.execute``, the one way in) is daemon/connection.py, compiled as
it is.

``serve_plain(blocking, queue)`` is ``Blocking.serve`` for the commonest
case at one job per request: plain claims parked on a plain queue,
served right after the push that woke them (``Committer.serve_now``) or
at the end of its turn;
tests/unit/test_blocking.py holds it to ``Blocking.serve``.
"""

import logging
from heapq import heappush

from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

from leaseq.commands import errors
from leaseq.commands.claims import compact_replies, job_replies
from leaseq.commands.claims cimport ClaimWait
from leaseq.commands.jobs import MAX_CONSUMER, _claim_options
from leaseq.commands.replies import Error
from leaseq.commands.table import TABLE
from leaseq.daemon.metrics import BUCKETS
from leaseq.storage.plain cimport ack_tokens, claim_next, claimable   # compiled from storage/plain.py
from leaseq.storage.plain cimport push_one
from leaseq.storage cimport _job as cjob
from leaseq.daemon._clock cimport Reading
from leaseq.storage.logbuffer cimport LogBuffer      # compiled from storage/logbuffer.py
from leaseq.storage.journal cimport Journal          # compiled from storage/journal.py
from leaseq.daemon.waiter cimport Waiter            # compiled from daemon/waiter.py
from leaseq.daemon.connection cimport Connection   # compiled from daemon/connection.py
from leaseq.daemon.blocking cimport Blocking       # compiled from daemon/blocking.py
from leaseq.storage.queue cimport Queue            # compiled from storage/queue.py
from leaseq.storage.store cimport Store            # compiled from storage/store.py
from leaseq.daemon.blocking import deal


log = logging.getLogger("leaseq.daemon.dispatch")

cdef extern from *:
    """
    #ifdef LEASEQ_PROFILE_USE
    #define LEASEQ_PROFILE_GUIDED 1
    #else
    #define LEASEQ_PROFILE_GUIDED 0
    #endif
    """
    int LEASEQ_PROFILE_GUIDED

PROFILE_GUIDED = bool(LEASEQ_PROFILE_GUIDED)   # built from a profile (bin/build-from-profile defines the macro)

cdef enum Kind:
    OTHER, PUSH, CLAIM, ACK

cdef tuple NAMES = (None, TABLE[b"qpush"].name, TABLE[b"qclaim"].name, TABLE[b"qack"].name)     # by Kind
cdef Py_ssize_t ARITY[4]
for _kind_, _name_ in ((PUSH, b"qpush"), (CLAIM, b"qclaim"), (ACK, b"qack")):
    ARITY[_kind_] = TABLE[_name_].arity
cdef tuple OBSERVES = ("",) + tuple(TABLE[name].observes for name in (b"qpush", b"qclaim", b"qack"))     # by Kind
cdef int PRIORITY = 5                  # a push without PRIORITY (commands.jobs.PushOptions)


cdef inline double _seconds():
    """``time.perf_counter()`` (the same clock on Linux)."""
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef inline bint _is(const unsigned char *s, Py_ssize_t n, const char *lower, Py_ssize_t m):
    """``s`` (of ``n`` bytes) is ``lower`` in any case (letters only)."""
    cdef Py_ssize_t i
    if n != m:
        return False
    for i in range(n):
        if (s[i] | 32) != <unsigned char>lower[i]:
            return False
    return True


cdef Kind _kind(bytes name):
    cdef const unsigned char *s = name
    cdef Py_ssize_t n = len(name)
    if _is(s, n, b"qpush", 5):
        return PUSH
    if _is(s, n, b"qclaim", 6):
        return CLAIM
    if _is(s, n, b"qack", 4):
        return ACK
    return OTHER


cdef inline bint _arity_ok(Kind kind, Py_ssize_t n):
    cdef Py_ssize_t arity = ARITY[<int>kind]
    return n == arity if arity > 0 else n >= -arity


include "../storage/_slots.pxi"

# What this module reads of the daemon's objects on every request, one
# ``Slots`` a class (at the offset, after one comparison of the class)
cdef Slots USER = Slots("leaseq.commands.acl.User", ("unrestricted",))
cdef Slots HOLDINGS = Slots("leaseq.daemon.holdings.Holdings", ("subscriptions",))
cdef Slots SERVER = Slots("leaseq.daemon.server.Server",
                          ("loading", "disk_error", "store", "oom", "settings", "stats", "metrics", "now_ms",
                           "committer", "disk", "stopping", "blocking", "clock", "read_only", "replicas_gate"))
cdef enum:
    S_LOADING, S_DISK_ERROR, S_STORE, S_OOM, S_SETTINGS, S_STATS, S_METRICS, S_NOW_MS, S_COMMITTER, S_DISK, \
        S_STOPPING, S_BLOCKING, S_CLOCK, S_READ_ONLY, S_REPLICAS_GATE
cdef Slots SETTINGS = Slots("leaseq.daemon.config.Settings", ("max_payload",))
cdef Slots STATS = Slots("leaseq.daemon.server.Stats", ("commands",))
cdef Slots METRICS = Slots("leaseq.daemon.metrics.Metrics", ("commands",))
# A journal's log is a LogBuffer or None (no log: no records, so no reply
# waits); the three below are the journal's methods of the same names, as C
# calls.


cdef inline object _mark(Journal journal):
    log = journal.log
    return 0 if log is None else (<LogBuffer>log).mark()


cdef object _settled_since(Journal journal, mark, claim_at):
    log = journal.log
    return None if log is None else (<LogBuffer>log).settled_since(mark, claim_at)


cdef object _ticket_since(Journal journal, mark):
    log = journal.log
    return None if log is None else (<LogBuffer>log).ticket_since(mark)


cdef Slots HISTOGRAM = Slots("leaseq.daemon.metrics.Histogram", ("counts", "total"))
cdef double BUCKET[32]                 # metrics.BUCKETS, as C numbers
cdef Py_ssize_t NBUCKETS = len(BUCKETS)
if NBUCKETS > 32:
    raise ImportError("daemon/_lane.pyx keeps 32 histogram bounds at most; metrics.BUCKETS has more")
for _i_, _bound_ in enumerate(BUCKETS):
    BUCKET[_i_] = _bound_


cdef int _observe(commands, str name, double seconds) except -1:
    """``Metrics.commands[name].observe(seconds)`` (``Histogram.observe``)."""
    cdef Py_ssize_t i = 0
    histogram = (<dict>commands).get(name)
    if histogram is None:
        histogram = commands[name]                # (a defaultdict: the first of its name)
    while i < NBUCKETS and BUCKET[i] < seconds:    # bisect_left over a few bounds
        i += 1
    counts = <list>get(HISTOGRAM, histogram, 0)
    counts[i] = counts[i] + 1
    put(HISTOGRAM, histogram, 1, get(HISTOGRAM, histogram, 1) + seconds)
    return 0


def observe(commands, str name, double seconds):
    """``_observe`` (for the tests)."""
    _observe(commands, name, seconds)


cdef inline object _now(server):
    """``server.now_ms()``, which is its clock's ``now``: a C call when the
    clock is the compiled ``Reading`` (the server's ``Clock`` derives from it)."""
    clock = get(SERVER, server, S_CLOCK)
    if isinstance(clock, Reading):
        return (<Reading>clock).c_now()
    return get(SERVER, server, S_NOW_MS)()


# commands.claims.job_replies is the compiled one with its first three arguments given (a partial) in
# the compiled flavour: called here as C
from leaseq.storage import _job as _job_module
cdef tuple _REPLIES_OF = (job_replies.args if getattr(job_replies, "func", None) is _job_module.job_replies
                          else None)


cdef inline list _job_replies(jobs):
    """``job_replies(jobs)``."""
    if _REPLIES_OF is None:
        return job_replies(jobs)
    return cjob.c_job_replies(_REPLIES_OF[0], _REPLIES_OF[1], _REPLIES_OF[2], jobs)


cdef object _runs_everything(client):
    """The client's server when the client may run everything (an
    unrestricted user, authenticated, not in MULTI, not in the RESP2
    pub/sub context), else None: a ``Connection``'s fields read as C, any
    other client's (the tests' stand-ins of ``commands.context.ClientContext``)
    by name."""
    cdef Connection conn
    if type(client) is Connection:
        conn = <Connection>client
        if (not conn.authenticated or conn.multi is not None or not get(USER, conn.acl_user, 0)
                or (get(HOLDINGS, conn.holdings, 0) and not conn.resp3)):
            return None
        return conn.server
    if (not client.authenticated or client.multi is not None or not get(USER, client.acl_user, 0)
            or (get(HOLDINGS, client.holdings, 0) and not client.resp3)):
        return None
    return client.server


def run(client, list args):
    """``(reply, ticket)`` as ``dispatch.execute`` answers, or None: not plain."""
    return _run(client, args)


cdef object _run(client, list args):
    """``run`` (a C call from the connection's turn)."""
    cdef Py_ssize_t n = len(args), i
    cdef Kind kind
    cdef bytes a
    if n < 3 or type(args[0]) is not bytes:
        return None
    kind = _kind(args[0])
    if kind == OTHER:
        return None
    if not _arity_ok(kind, n):
        return None
    # the checks of dispatch._execute, all passed
    server = _runs_everything(client)
    if server is None:
        return None
    if (get(SERVER, server, S_LOADING) or get(SERVER, server, S_DISK_ERROR) is not None
            or get(SERVER, server, S_READ_ONLY) or get(SERVER, server, S_REPLICAS_GATE)):
        return None
    cdef Store store = get(SERVER, server, S_STORE)
    q = store.queues.get(args[1])
    if q is None:
        return None
    config = (<Queue>q).config
    # the plain form of the command
    if kind == PUSH:
        payload = args[2]
        if (n != 3 or get(SERVER, server, S_OOM)
                or len(<bytes>payload) > get(SETTINGS, get(SERVER, server, S_SETTINGS), 0)
                or get(CONFIG, config, K_MAXLEN)):
            return None
    elif kind == CLAIM:
        consumer = args[2]
        if not 1 <= len(<bytes>consumer) <= MAX_CONSUMER:
            return None
        try:
            found = (<dict>_CLAIM_OPTIONS_SEEN).get(tuple(args[3:]))    # _claim_options, remembered
            count, lease_ms, block, session, compact = _claim_options(args, 3) if found is None else found
        except Error:
            return None
        if session or get(CONFIG, config, K_WINDOW):
            return None
    else:
        for i in range(2, n):          # RESULT (in any case) is the one keyword; everything else is a token
            a = args[i]
            if _is(a, len(a), b"result", 6):
                return None
    # as dispatch.execute and dispatch.run do around a handler
    journal = store.journal
    mark = _mark(journal)
    stats = get(SERVER, server, S_STATS)
    put(STATS, stats, 0, get(STATS, stats, 0) + 1)
    name = NAMES[<int>kind]
    if type(client) is Connection:
        (<Connection>client).last_command = name
    else:
        client.last_command = name
    started = _seconds()
    try:
        if kind == PUSH:
            reply = push_one(store, q, payload, PRIORITY, _now(server))
        elif kind == CLAIM:
            if lease_ms is None:
                lease_ms = get(CONFIG, config, K_LEASE)
            now = _now(server)          # claim_now's work, without holder
            jobs = claim_next(store, q, now, count, now + lease_ms, consumer)
            reply = (compact_replies(jobs) if compact else _job_replies(jobs)) if jobs else []
            if not reply and block is not None and not client.in_exec:
                reply = ClaimWait(server, q, consumer, count, lease_ms, block, None, False, compact)
        else:
            reply = ack_tokens(store, q, args[2:], _now(server))
    except Error as e:
        reply = e
    except Exception:
        log.exception("command %s failed", name.upper())
        reply = errors.INTERNAL
    _observe(get(METRICS, get(SERVER, server, S_METRICS), 0), name, _seconds() - started)
    observes = OBSERVES[<int>kind]
    if observes:
        return reply, _settled_since(journal, mark, _now(server) if observes == "claims" else None)
    return reply, _ticket_since(journal, mark)


cdef object _CLAIM_OPTIONS_SEEN = _claim_options.seen


cdef Slots CONFIG = Slots("leaseq.storage.config.QueueConfig", ("maxlen", "window", "lease"))
cdef enum:
    K_MAXLEN, K_WINDOW, K_LEASE


def serve_plain(Blocking blocking, queue):
    """``Blocking.serve(queue)`` when only plain claims wait on it (no work
    stream, no cohort, no SESSION, no closed connection): True when
    served, False (before anything changed) for the ordinary ``serve``.
    The jobs the rules let out (``plain.claimable``) are dealt as ``deal``
    deals them, and each claimer's share is claimed in waiting order by
    ``plain.claim_next``, what the claim's own ``take`` calls."""
    return _serve_plain(blocking, queue)


cdef bint _serve_plain(Blocking blocking, queue) except -1:
    """``serve_plain``."""
    cdef Waiter w
    cdef ClaimWait wait
    waiters = (<dict>blocking.by_queue).get(queue)
    if not waiters or queue in blocking.workers or queue in blocking.cohorts:
        return False
    cdef Py_ssize_t i, n = len(<list>waiters), total = 0
    for w in <list>waiters:
        wait = w.wait
        conn = w.conn
        if ((<Connection>conn).closed if type(conn) is Connection else conn.closed) or wait.cohort \
                or wait.holder is not None:
            return False
        total += wait.count
    server = blocking.server
    cdef Store store = get(SERVER, server, S_STORE)
    journal = store.journal
    if n == 1:           # the commonest: one claimer takes what there is, up to its COUNT, as claim_next does
        takers, shares = waiters, None
    else:
        available = claimable(store, queue, _now(server), total)
        takers = list(<list>waiters)
        shares = deal(available, [(<ClaimWait>w.wait).count for w in takers])
    for i in range(n):
        w = (<list>takers)[i]
        wait = w.wait
        share = wait.count if shares is None else (<list>shares)[i]
        if not share:
            continue
        mark = _mark(journal)
        now = _now(server)
        jobs = claim_next(store, queue, now, share, now + wait.lease_ms, wait.consumer)
        replies = (compact_replies(jobs) if wait.compact else _job_replies(jobs)) if jobs else jobs
        if not replies:
            break
        ticket = _settled_since(journal, mark, _now(server))
        blocking.cancel(w)
        conn = w.conn
        if type(conn) is Connection:
            (<Connection>conn).unblock(replies, ticket)
        else:
            conn.unblock(replies, ticket)
    if queue in blocking.by_queue or queue in blocking.workers:
        blocking._arm(queue)
    return True


def layouts():
    """The ``Slots`` this module reads through (tests/unit/test_slots.py)."""
    return [USER, HOLDINGS, SERVER, SETTINGS, STATS, METRICS, HISTOGRAM, CONFIG]
