# cython: language_level=3
"""The plain lane: ``daemon.dispatch.execute`` for the three commands of a
job's life (QPUSH, QCLAIM, QACK) in their plain forms, compiled
(docs/performance.md, "The plain lane").

A worker's job is three requests, and at one job per request the checks and
the bookkeeping around each handler cost more than the handler's own work.
Here they are one C function: the command's name is matched in C, the
checks of ``dispatch._execute`` are read off the client and the server once,
and the work goes straight to the store: ``storage.plain``'s
``push_one``, ``claim_next`` and ``ack_tokens``, their compiled twin
(``storage._plain``) asked first, so what a command does to the queues is
defined once, in Python, and compiled once, in storage.

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

``run_pending(conn)`` is ``Connection.run_pending``, the connection's turn
(its commands run in order, their replies encoded into the outbox, what
may go written, the committer told), compiled: the class runs it in the
compiled flavour, and tests/unit/test_connection_turn.py holds it to the
Python one.  It reads the connection, the server, the committer and the
outbox at their slots' offsets (``Slots``, storage/_slots.pxi), as ``run``
reads the client and the store.

``serve_plain(blocking, queue)`` is ``Blocking.serve`` for the commonest
case at one job per request: plain claims parked on a plain queue,
served right after the push that woke them (``Committer.serve_now``) or
at the end of its turn;
tests/unit/test_blocking.py holds it to ``Blocking.serve``.
"""

import logging
from heapq import heappush
from operator import attrgetter

from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

from leaseq.commands import errors
from leaseq.commands.jobs import MAX_CONSUMER, ClaimWait, _claim_options, claim_now, job_replies
from leaseq.commands.replies import Error
from leaseq.commands.table import TABLE
from leaseq.daemon.metrics import BUCKETS
from leaseq.storage import flow as _flow
from leaseq.storage import plain as plain_module
from leaseq.storage cimport _plain as cplain     # storage.plain's twin as C calls, when plain_module.twin is it
from leaseq.storage cimport _job as cjob
from leaseq.daemon._clock cimport Reading
from leaseq.daemon._parser cimport RequestParser
from leaseq.daemon cimport _resp as cresp
from leaseq.storage._index cimport TimeIndex
from leaseq.storage.logbuffer cimport LogBuffer      # compiled from storage/logbuffer.py
from leaseq.daemon.outbox cimport Outbox            # compiled from daemon/outbox.py
from leaseq.daemon.timeouts cimport Timeout, Timeouts   # compiled from daemon/timeouts.py


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
cdef Slots CLIENT = Slots("leaseq.daemon.connection.Connection",
                          ("authenticated", "multi", "acl_user", "holdings", "server", "resp3", "in_exec",
                           "last_command", "closed", "pending", "waiting", "quitting", "outbox", "protocol_error",
                           "transport", "writing_paused", "last_active", "parser"))
cdef enum:
    C_AUTHENTICATED, C_MULTI, C_ACL_USER, C_HOLDINGS, C_SERVER, C_RESP3, C_IN_EXEC, C_LAST_COMMAND, C_CLOSED, \
        C_PENDING, C_WAITING, C_QUITTING, C_OUTBOX, C_PROTOCOL_ERROR, C_TRANSPORT, C_WRITING_PAUSED, C_LAST_ACTIVE, \
        C_PARSER
cdef Slots USER = Slots("leaseq.commands.acl.User", ("unrestricted",))
cdef Slots HOLDINGS = Slots("leaseq.daemon.holdings.Holdings", ("subscriptions",))
cdef Slots SERVER = Slots("leaseq.daemon.server.Server",
                          ("loading", "disk_error", "store", "oom", "settings", "stats", "metrics", "now_ms",
                           "committer", "disk", "stopping", "blocking", "clock"))
cdef enum:
    S_LOADING, S_DISK_ERROR, S_STORE, S_OOM, S_SETTINGS, S_STATS, S_METRICS, S_NOW_MS, S_COMMITTER, S_DISK, \
        S_STOPPING, S_BLOCKING, S_CLOCK
cdef Slots SETTINGS = Slots("leaseq.daemon.config.Settings", ("max_payload",))
cdef Slots STATS = Slots("leaseq.daemon.server.Stats", ("commands",))
cdef Slots METRICS = Slots("leaseq.daemon.metrics.Metrics", ("commands",))
cdef Slots STORE = Slots("leaseq.storage.store.Store", ("queues", "journal", "woken"))
cdef enum:
    ST_QUEUES, ST_JOURNAL, ST_WOKEN
cdef Slots QUEUE = Slots("leaseq.storage.queue.Queue", ("config", "indexes"))
cdef enum:
    Q_CONFIG, Q_INDEXES
cdef Slots JOURNAL = Slots("leaseq.storage.journal.Journal", ("log",))
cdef enum:
    J_LOG

# A journal's log is a LogBuffer or None (no log: no records, so no reply
# waits; Journal refuses anything else); the three below are its methods of
# the same names, as C calls.


cdef inline object _mark(journal):
    log = get(JOURNAL, journal, J_LOG)
    return 0 if log is None else (<LogBuffer>log).mark()


cdef object _settled_since(journal, mark, claim_at):
    log = get(JOURNAL, journal, J_LOG)
    return None if log is None else (<LogBuffer>log).settled_since(mark, claim_at)


cdef object _ticket_since(journal, mark):
    log = get(JOURNAL, journal, J_LOG)
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


# commands.jobs.job_replies is the compiled one with its first three arguments given (a partial) in
# the compiled flavour: called here as C
from leaseq.storage import _job as _job_module
cdef tuple _REPLIES_OF = (job_replies.args if getattr(job_replies, "func", None) is _job_module.job_replies
                          else None)


cdef inline list _job_replies(jobs):
    """``job_replies(jobs)``."""
    if _REPLIES_OF is None:
        return job_replies(jobs)
    return cjob.c_job_replies(_REPLIES_OF[0], _REPLIES_OF[1], _REPLIES_OF[2], jobs)


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
    if (not get(CLIENT, client, C_AUTHENTICATED) or get(CLIENT, client, C_MULTI) is not None
            or not get(USER, get(CLIENT, client, C_ACL_USER), 0)):
        return None
    if get(HOLDINGS, get(CLIENT, client, C_HOLDINGS), 0) and not get(CLIENT, client, C_RESP3):
        return None
    server = get(CLIENT, client, C_SERVER)
    if get(SERVER, server, S_LOADING) or get(SERVER, server, S_DISK_ERROR) is not None:
        return None
    store = get(SERVER, server, S_STORE)
    q = (<dict>get(STORE, store, ST_QUEUES)).get(args[1])
    if q is None:
        return None
    config = get(QUEUE, q, 0)
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
            count, lease_ms, block, session = _claim_options(args, 3) if found is None else found
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
    journal = get(STORE, store, ST_JOURNAL)
    mark = _mark(journal)
    stats = get(SERVER, server, S_STATS)
    put(STATS, stats, 0, get(STATS, stats, 0) + 1)
    name = NAMES[<int>kind]
    put(CLIENT, client, C_LAST_COMMAND, name)
    started = _seconds()
    plain = plain_module.twin        # storage.plain's compiled twin (None: not built, or a test turned it off)
    try:
        if kind == PUSH:
            now = _now(server)
            reply = None if plain is None else cplain.c_push_one(store, q, payload, PRIORITY, now)
            if reply is None:
                reply = plain_module.push_one(store, q, payload, PRIORITY, now)
        elif kind == CLAIM:
            if lease_ms is None:
                lease_ms = get(CONFIG, config, K_LEASE)
            now = _now(server)          # claim_now's work, without holder
            jobs = None if plain is None else cplain.c_claim_next(store, q, now, count, now + lease_ms, consumer)
            if jobs is None:
                reply = claim_now(server, q, consumer, count, lease_ms, None)
            else:
                reply = _job_replies(jobs) if jobs else []
            if not reply and block is not None and not get(CLIENT, client, C_IN_EXEC):
                reply = _claim_wait(server, q, consumer, count, lease_ms, block)
        else:
            now = _now(server)
            reply = None if plain is None else cplain.c_ack_tokens(store, q, args[2:], now)
            if reply is None:
                reply = plain_module.ack_tokens(store, q, args[2:], now)
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


cdef Slots BLOCKING = Slots("leaseq.daemon.blocking.Blocking",
                           ("by_queue", "workers", "cohorts", "server", "woken", "timers", "loop", "timeouts"))
cdef enum:
    B_BY_QUEUE, B_WORKERS, B_COHORTS, B_SERVER, B_WOKEN, B_TIMERS, B_LOOP, B_TIMEOUTS
cdef Slots WAITER = Slots("leaseq.daemon.waiter.Waiter", ("wait", "conn", "timer"))
cdef enum:
    WT_WAIT, WT_CONN, WT_TIMER
cdef Slots CLAIM_WAIT = Slots("leaseq.commands.jobs.ClaimWait",
                              ("cohort", "holder", "count", "lease_ms", "consumer", "queue", "timeout_ms", "server"))
cdef enum:
    W_COHORT, W_HOLDER, W_COUNT, W_LEASE_MS, W_CONSUMER, W_QUEUE, W_TIMEOUT_MS, W_SERVER
cdef object _CLAIM_OPTIONS_SEEN = _claim_options.seen


cdef object _claim_wait(server, queue, consumer, count, lease_ms, timeout_ms):
    """``ClaimWait(server, queue, consumer, count, lease_ms, timeout_ms)``
    (holder None, not a cohort's), its slots set here (commands/jobs.py)."""
    wait = ClaimWait.__new__(ClaimWait)
    put(CLAIM_WAIT, wait, W_SERVER, server)
    put(CLAIM_WAIT, wait, W_QUEUE, queue)
    put(CLAIM_WAIT, wait, W_CONSUMER, consumer)
    put(CLAIM_WAIT, wait, W_COUNT, count)
    put(CLAIM_WAIT, wait, W_LEASE_MS, lease_ms)
    put(CLAIM_WAIT, wait, W_TIMEOUT_MS, timeout_ms)
    put(CLAIM_WAIT, wait, W_HOLDER, None)
    put(CLAIM_WAIT, wait, W_COHORT, False)
    return wait


cdef Slots INDEXES = Slots("leaseq.storage.indexes.Indexes", ("delayed", "leases", "groups"))
cdef enum:
    X_DELAYED, X_LEASES, X_GROUPS
cdef Slots CONFIG = Slots("leaseq.storage.config.QueueConfig", ("rate", "maxlen", "window", "lease"))
cdef enum:
    K_RATE, K_MAXLEN, K_WINDOW, K_LEASE


cdef object _Waiter = None            # daemon.waiter.Waiter, and Connection.unblock's function,
cdef object _UNBLOCK = None           # and daemon.blocking.Blocking (imported at first use: those
cdef object _Blocking = None          # modules import this one), and this module's run_pending
cdef object _RUN_PENDING = None


cdef int _park(blocking, conn, wait) except -1:
    """``Blocking.park(conn, wait)`` (the definition, daemon/blocking.py) on
    the slots of a real ``Blocking``, for a claim that is not a cohort's;
    anything else is handed to ``park``."""
    if _Waiter is None:
        _imports()
    if type(blocking) is not _Blocking or get(CLAIM_WAIT, wait, W_COHORT):
        blocking.park(conn, wait)
        return 0
    w = _Waiter.__new__(_Waiter)                          # Waiter(conn, wait)
    put(WAITER, w, WT_CONN, conn)
    put(WAITER, w, WT_WAIT, wait)
    put(WAITER, w, WT_TIMER, None)
    put(CLIENT, conn, C_WAITING, w)
    queue = get(CLAIM_WAIT, wait, W_QUEUE)
    by_queue = <dict>get(BLOCKING, blocking, B_BY_QUEUE)
    waiters = by_queue.get(queue)                         # (setdefault would make a list at every park)
    if waiters is None:
        by_queue[queue] = [w]
    else:
        (<list>waiters).append(w)
    timeout_ms = get(CLAIM_WAIT, wait, W_TIMEOUT_MS)
    if timeout_ms:
        put(WAITER, w, WT_TIMER, (<Timeouts?>get(BLOCKING, blocking, B_TIMEOUTS)).add(timeout_ms / 1000.0, w))
    _arm(blocking, queue)
    return 0


cdef inline object _first_moment(index):
    """``index.first()`` of a time index: a C read of the compiled one."""
    if type(index) is TimeIndex:
        return (<TimeIndex>index).first_moment()
    return index.first()


cdef int _arm(blocking, queue) except -1:
    """``Blocking._arm(queue)`` (the definition) on the slots of a real
    ``Blocking``, with ``Indexes.next_due``; ``flow.next_room`` and
    ``_served_late`` are asked only of a queue with a RATE or groups (of
    any other, both answer None and False)."""
    if _Blocking is None:
        _imports()
    if type(blocking) is not _Blocking:
        blocking._arm(queue)
        return 0
    if (not (<dict>get(BLOCKING, blocking, B_BY_QUEUE)).get(queue)
            and not (<dict>get(BLOCKING, blocking, B_WORKERS)).get(queue)):
        blocking._forget(queue)
        return 0
    server = get(BLOCKING, blocking, B_SERVER)
    now = _now(server)
    indexes = get(QUEUE, queue, Q_INDEXES)
    a = _first_moment(get(INDEXES, indexes, X_DELAYED))          # Indexes.next_due
    b = _first_moment(get(INDEXES, indexes, X_LEASES))
    due = b if a is None else (a if b is None or a < b else b)
    if get(CONFIG, get(QUEUE, queue, Q_CONFIG), K_RATE)[0] or get(INDEXES, indexes, X_GROUPS) is not None:
        room = _flow.next_room(queue, now)
        if room is None and blocking._served_late(queue, now):
            room = now
        if room is not None and (due is None or room < due):
            due = room
    timers = <dict>get(BLOCKING, blocking, B_TIMERS)
    if due is None:
        return 0                                          # (a timer set earlier stays)
    current = timers.get(queue)
    if current is not None:
        if current[0] <= due:
            return 0
        current[1].cancel()
    delay = max(0, due - now + 1) / 1000.0
    timers[queue] = (due, get(BLOCKING, blocking, B_LOOP).call_later(delay, blocking._fire, queue))
    return 0


cdef int _cancel(blocking, w) except -1:
    """``Blocking.cancel(w)`` (the definition, daemon/blocking.py) for a
    claim's ``Waiter``, with ``_forget``, on their slots; anything else is
    handed to ``cancel``."""
    if type(w) is not _Waiter:
        blocking.cancel(w)
        return 0
    timer = get(WAITER, w, WT_TIMER)
    if timer is not None:
        (<Timeout?>timer).cancel()
        put(WAITER, w, WT_TIMER, None)
    queue = get(CLAIM_WAIT, get(WAITER, w, WT_WAIT), W_QUEUE)
    by_queue = <dict>get(BLOCKING, blocking, B_BY_QUEUE)
    waiters = by_queue.get(queue)
    if waiters and w in waiters:
        waiters.remove(w)
        if not waiters:                                   # Blocking._forget (its waiters: none left)
            if (<dict>get(BLOCKING, blocking, B_WORKERS)).get(queue):
                return 0
            by_queue.pop(queue, None)                     # (its timer stays: see _forget)
            cohort = (<dict>get(BLOCKING, blocking, B_COHORTS)).pop(queue, None)
            if cohort is not None:
                cohort.cancel()
    return 0


cdef int _unblock(conn, reply, ticket) except -1:
    """``conn.unblock(reply, ticket)``: ``Connection.unblock`` (the
    definition, daemon/connection.py) with its ``answer`` on the
    connection's slots, when ``conn`` has Connection's own;
    any other is called."""
    if not _connection_own(type(conn)):
        conn.unblock(reply, ticket)
        return 0
    put(CLIENT, conn, C_WAITING, None)
    if get(CLIENT, conn, C_CLOSED):
        return 0
    if reply is not NO_REPLY:
        if (<Outbox?>get(CLIENT, conn, C_OUTBOX)).add(_encode(reply, get(CLIENT, conn, C_RESP3)), ticket):
            (<set>get(COMMITTER, get(SERVER, get(CLIENT, conn, C_SERVER), S_COMMITTER), M_WAITERS)).add(conn)
    _run_pending(conn)
    return 0


cdef object _OWN_TYPE = None          # the class _connection_own said yes of last,
cdef unsigned int _OWN_VERSION = 0    # and its version tag then


cdef bint _connection_own(type cls) except -1:
    """Whether objects of ``cls`` have Connection's own ``unblock`` and
    ``run_pending`` (this module's), which ``_unblock`` does on their slots.
    Asked of the class once, then again only when it changes: CPython gives
    a class a new version tag whenever one of its attributes is set."""
    global _OWN_TYPE, _OWN_VERSION
    cdef unsigned int version = (<PyTypeObject *>cls).tp_version_tag
    if cls is _OWN_TYPE and version == _OWN_VERSION and version != 0:
        return True
    if getattr(cls, "unblock", None) is not _UNBLOCK or getattr(cls, "run_pending", None) is not _RUN_PENDING:
        return False
    _OWN_TYPE, _OWN_VERSION = cls, (<PyTypeObject *>cls).tp_version_tag
    return True


def connection_own(cls):
    """``_connection_own`` (for the tests)."""
    if _Waiter is None:
        _imports()
    return _connection_own(cls)


cdef int _imports() except -1:
    global _Waiter, _UNBLOCK, _Blocking, _RUN_PENDING
    from leaseq.daemon.blocking import Blocking
    from leaseq.daemon.connection import Connection
    from leaseq.daemon.waiter import Waiter
    _Waiter, _UNBLOCK, _Blocking, _RUN_PENDING = Waiter, Connection.__dict__["unblock"], Blocking, run_pending
    return 0


def serve_plain(blocking, queue):
    """``Blocking.serve(queue)`` when only plain claims wait on it (no work
    stream, no cohort, no SESSION, no closed connection) and the queue is
    plain (``storage._plain``): True when served, False (before anything
    changed) for the ordinary ``serve``.  The jobs the rules let out are
    dealt as ``deal`` deals them, and each claimer's share is claimed in
    waiting order, by the compiled ``claim_next`` or, for jobs it declines
    (a job with a rare field), by the claim's own ``take``."""
    return _serve_plain(blocking, queue)


cdef bint _serve_plain(blocking, queue) except -1:
    """``serve_plain`` (a C call from the end of the turn)."""
    waiters = (<dict>get(BLOCKING, blocking, B_BY_QUEUE)).get(queue)
    if (not waiters or queue in get(BLOCKING, blocking, B_WORKERS)
            or queue in get(BLOCKING, blocking, B_COHORTS)):
        return False
    plain = plain_module.twin
    if plain is None:
        return False
    cdef Py_ssize_t i, n = len(<list>waiters), total = 0
    for w in <list>waiters:
        wait = get(WAITER, w, WT_WAIT)
        if (get(CLIENT, get(WAITER, w, WT_CONN), C_CLOSED) or get(CLAIM_WAIT, wait, W_COHORT)
                or get(CLAIM_WAIT, wait, W_HOLDER) is not None):
            return False
        total += <Py_ssize_t>get(CLAIM_WAIT, wait, W_COUNT)
    server = get(BLOCKING, blocking, B_SERVER)
    store = get(SERVER, server, S_STORE)
    journal = get(STORE, store, ST_JOURNAL)
    if n == 1:           # the commonest: one claimer takes what there is, up to its COUNT, as claim_next does
        takers, shares = waiters, None
    else:
        available = cplain.c_claimable(store, queue, _now(server), total)
        if available is None:
            return False
        takers, shares = list(<list>waiters), _deal(available, total, <list>waiters)
    if _Waiter is None:
        _imports()
    for i in range(n):
        w = (<list>takers)[i]
        wait = get(WAITER, w, WT_WAIT)
        share = get(CLAIM_WAIT, wait, W_COUNT) if shares is None else (<list>shares)[i]
        if not share:
            continue
        mark = _mark(journal)
        now = _now(server)
        jobs = cplain.c_claim_next(store, queue, now, share, now + get(CLAIM_WAIT, wait, W_LEASE_MS),
                                   get(CLAIM_WAIT, wait, W_CONSUMER))
        if jobs is None:
            if shares is None:
                return False            # (at most a fold changed, which the ordinary serve repeats)
            replies = wait.take(share)
        else:
            replies = _job_replies(jobs) if jobs else jobs
        if not replies:
            break
        ticket = _settled_since(journal, mark, _now(server))
        _cancel(blocking, w)
        _unblock(get(WAITER, w, WT_CONN), replies, ticket)
    if queue in get(BLOCKING, blocking, B_BY_QUEUE) or queue in get(BLOCKING, blocking, B_WORKERS):
        _arm(blocking, queue)
    return True


cdef list _deal(Py_ssize_t available, Py_ssize_t total, list waiters):
    """``deal(available, counts)`` (the definition, daemon/blocking.py) of
    the waiters' COUNTs, for more than one waiter."""
    cdef Py_ssize_t i, n = len(waiters), left, c
    counts = [get(CLAIM_WAIT, get(WAITER, w, WT_WAIT), W_COUNT) for w in waiters]
    if available >= total:
        return counts
    shares = [available * <Py_ssize_t>c // total for c in counts]
    left = available - sum(shares)
    i = 0
    while left:
        if shares[i] < counts[i]:
            shares[i] += 1
            left -= 1
        i = (i + 1) % n
    return shares


def deal_counts(Py_ssize_t available, list counts):
    """``_deal`` of waiters asking ``counts`` (for the tests)."""
    from leaseq.daemon.waiter import Waiter
    waiters = []
    for c in counts:
        wait = ClaimWait.__new__(ClaimWait)
        wait.count = c
        waiters.append(Waiter(None, wait))
    return _deal(available, sum(counts), waiters)


# -- the connection's turn ------------------------------------------------------------------------------

from leaseq.commands.replies import NO_REPLY
from leaseq.commands.results import ResultWait
from leaseq.daemon.resp import ProtocolError, encode
from leaseq.daemon import _resp as _resp_module

cdef bint _C_ENCODE = encode is _resp_module.encode    # daemon.resp's encode is the compiled one


cdef inline bytes _encode(reply, bint resp3):
    """``encode(reply, resp3)``: a C call to the compiled one."""
    return cresp.c_encode(reply, resp3) if _C_ENCODE else encode(reply, resp3)

cdef object _ordinary = None          # dispatch.execute (imported at first use: dispatch imports this module)

cdef Slots COMMITTER = Slots("leaseq.daemon.committer.Committer",
                            ("closed", "wal", "scheduled", "loop", "waiters", "server", "serving"))
cdef enum:
    M_CLOSED, M_WAL, M_SCHEDULED, M_LOOP, M_WAITERS, M_SERVER, M_SERVING


cdef object _BY_QID = attrgetter("qid")


cdef inline bint _woken_waited(server, blocking) except -1:
    """Whether a queue was woken that someone waits on: the part of
    ``Committer.work_left`` and ``serve_now`` that asks it."""
    if get(BLOCKING, blocking, B_WOKEN):
        return True
    if get(STORE, get(SERVER, server, S_STORE), ST_WOKEN):
        return bool(get(BLOCKING, blocking, B_BY_QUEUE) or get(BLOCKING, blocking, B_WORKERS))
    return False


cdef int _serve_woken(blocking) except -1:
    """``Blocking.serve_woken`` (the definition, daemon/blocking.py), with
    the store's ``take_woken``, on their slots."""
    store = get(SERVER, get(BLOCKING, blocking, B_SERVER), S_STORE)
    woken = get(STORE, store, ST_WOKEN)
    put(STORE, store, ST_WOKEN, set())
    if get(BLOCKING, blocking, B_WOKEN):
        woken |= get(BLOCKING, blocking, B_WOKEN)
        put(BLOCKING, blocking, B_WOKEN, set())
    for q in sorted(woken, key=_BY_QID) if len(<set>woken) > 1 else woken:
        if q in get(BLOCKING, blocking, B_BY_QUEUE) or q in get(BLOCKING, blocking, B_WORKERS):
            if not _serve_plain(blocking, q):
                blocking.serve(q)
    return 0
cdef Slots DISK_FAULTS = Slots("leaseq.daemon.faults.DiskFaults", ("rebuilding",))


def data_received(conn, data):
    """``Connection.data_received``, compiled (what it does is written there)."""
    put(CLIENT, conn, C_LAST_ACTIVE, _seconds())              # time.monotonic(): the same clock
    try:
        parser = get(CLIENT, conn, C_PARSER)
        commands = (<RequestParser>parser).c_feed(data) if type(parser) is RequestParser else parser.feed(data)
    except ProtocolError as e:
        commands = e.commands
        conn.protocol_error = str(e)
        conn.server.stats.protocol_errors += 1
        conn.transport.pause_reading()
    get(CLIENT, conn, C_PENDING).extend(commands)
    _run_pending(conn)


def run_pending(conn):
    """``Connection.run_pending``, compiled (what it does is written there)."""
    _run_pending(conn)


cdef int _run_pending(conn) except -1:
    global _ordinary
    server = get(CLIENT, conn, C_SERVER)
    pending = get(CLIENT, conn, C_PENDING)
    committer = get(SERVER, server, S_COMMITTER)
    if get(COMMITTER, committer, M_CLOSED):
        pending.clear()
    if get(DISK_FAULTS, get(SERVER, server, S_DISK), 0):
        return 0
    cdef Outbox outbox = get(CLIENT, conn, C_OUTBOX)
    while (pending and get(CLIENT, conn, C_WAITING) is None and not get(CLIENT, conn, C_QUITTING)
           and not get(CLIENT, conn, C_CLOSED)):
        args = pending.popleft()
        got = _run(conn, args)
        if got is None:
            if _ordinary is None:
                from leaseq.daemon.dispatch import execute as _ordinary
            got = _ordinary(conn, args)
        reply, ticket = got
        kind = type(reply)
        if kind is ClaimWait or kind is ResultWait:
            if get(SERVER, server, S_STOPPING):
                reply = reply.expired()
            else:
                if ticket is not None:
                    outbox.hold_place(ticket)
                    (<set>get(COMMITTER, committer, M_WAITERS)).add(conn)
                if kind is ClaimWait:
                    _park(get(SERVER, server, S_BLOCKING), conn, reply)
                else:
                    get(SERVER, server, S_BLOCKING).results.park(conn, reply)
                break
        if reply is not NO_REPLY:
            if outbox.add(_encode(reply, get(CLIENT, conn, C_RESP3)), ticket):
                (<set>get(COMMITTER, committer, M_WAITERS)).add(conn)
    if (get(CLIENT, conn, C_PROTOCOL_ERROR) is not None and not pending
            and get(CLIENT, conn, C_WAITING) is None and not get(CLIENT, conn, C_QUITTING)):
        conn.answer(errors.protocol_error(get(CLIENT, conn, C_PROTOCOL_ERROR)))
        put(CLIENT, conn, C_QUITTING, True)
    ready = outbox.take()                             # then Connection._write
    if ready:
        if not get(CLIENT, conn, C_CLOSED):
            get(CLIENT, conn, C_TRANSPORT).write(ready)
            if get(CLIENT, conn, C_WRITING_PAUSED):
                conn._check_output()
    if get(CLIENT, conn, C_QUITTING) and not get(CLIENT, conn, C_CLOSED) and not outbox.held:
        get(CLIENT, conn, C_TRANSPORT).close()
    blocking = get(SERVER, server, S_BLOCKING)
    cdef LogBuffer wal = get(COMMITTER, committer, M_WAL)
    if (not outbox.held and not wal.buffer and not get(COMMITTER, committer, M_SERVING)
            and not get(COMMITTER, committer, M_CLOSED) and _woken_waited(server, blocking)):   # Committer.serve_now
        put(COMMITTER, committer, M_SERVING, True)
        try:
            _serve_woken(blocking)
        finally:
            put(COMMITTER, committer, M_SERVING, False)
    if outbox.held or wal.buffer or _woken_waited(server, blocking):  # Committer.work_left
        if not get(COMMITTER, committer, M_SCHEDULED):                                  # Committer.touch
            put(COMMITTER, committer, M_SCHEDULED, True)
            get(COMMITTER, committer, M_LOOP).call_soon(committer.end_of_turn)
    return 0


def layouts():
    """The ``Slots`` this module reads through (tests/unit/test_slots.py)."""
    return [CLIENT, USER, HOLDINGS, SERVER, SETTINGS, STATS, METRICS, STORE, QUEUE, JOURNAL, HISTOGRAM,
            BLOCKING, WAITER, CLAIM_WAIT, INDEXES, CONFIG, COMMITTER, DISK_FAULTS]
