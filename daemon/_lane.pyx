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

``serve_one(blocking, queue)`` is ``Blocking.serve`` for the commonest
case at one job per request: one plain claim parked on a plain queue,
served at the end of the turn in which a push woke it;
tests/unit/test_blocking.py holds it to ``Blocking.serve``.
"""

import logging

from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

from leaseq.commands import errors
from leaseq.commands.jobs import MAX_CONSUMER, ClaimWait, _claim_options, claim_now, job_replies
from leaseq.commands.replies import Error
from leaseq.commands.table import TABLE
from leaseq.storage import plain as plain_module

log = logging.getLogger("leaseq.daemon.dispatch")

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


def run(client, list args):
    """``(reply, ticket)`` as ``dispatch.execute`` answers, or None: not plain."""
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
    if not client.authenticated or client.multi is not None or not client.acl_user.unrestricted:
        return None
    if client.holdings.subscriptions and not client.resp3:
        return None
    server = client.server
    if server.loading or server.disk_error is not None:
        return None
    store = server.store
    q = store.queues.get(args[1])
    if q is None:
        return None
    # the plain form of the command
    if kind == PUSH:
        payload = args[2]
        if n != 3 or server.oom or len(<bytes>payload) > server.settings.max_payload or q.config.maxlen:
            return None
    elif kind == CLAIM:
        consumer = args[2]
        if not 1 <= len(<bytes>consumer) <= MAX_CONSUMER:
            return None
        try:
            count, lease_ms, block, session = _claim_options(args, 3)
        except Error:
            return None
        if session or q.config.window:
            return None
    else:
        for i in range(2, n):          # RESULT (in any case) is the one keyword; everything else is a token
            a = args[i]
            if _is(a, len(a), b"result", 6):
                return None
    # as dispatch.execute and dispatch.run do around a handler
    journal = store.journal
    mark = journal.mark()
    server.stats.commands += 1
    client.last_command = name = NAMES[<int>kind]
    started = _seconds()
    plain = plain_module.twin        # storage.plain's compiled twin, asked straight (None: it declined)
    try:
        if kind == PUSH:
            now = server.now_ms()
            reply = None if plain is None else plain.push_one(store, q, payload, PRIORITY, now)
            if reply is None:
                reply = plain_module.push_one(store, q, payload, PRIORITY, now)
        elif kind == CLAIM:
            if lease_ms is None:
                lease_ms = q.config.lease
            now = server.now_ms()          # claim_now's work, without holder
            jobs = None if plain is None else plain.claim_next(store, q, now, count, now + lease_ms, consumer)
            if jobs is None:
                reply = claim_now(server, q, consumer, count, lease_ms, None)
            else:
                reply = job_replies(jobs) if jobs else []
            if not reply and block is not None and not client.in_exec:
                reply = ClaimWait(server, q, consumer, count, lease_ms, block, None)
        else:
            now = server.now_ms()
            reply = None if plain is None else plain.ack_tokens(store, q, args[2:], now)
            if reply is None:
                reply = plain_module.ack_tokens(store, q, args[2:], now)
    except Error as e:
        reply = e
    except Exception:
        log.exception("command %s failed", name.upper())
        reply = errors.INTERNAL
    server.metrics.commands[name].observe(_seconds() - started)
    observes = OBSERVES[<int>kind]
    if observes:
        return reply, journal.settled_since(mark, server.now_ms() if observes == "claims" else None)
    return reply, journal.ticket_since(mark)


def serve_one(blocking, queue):
    """``Blocking.serve(queue)`` when one plain claim waits on it (no work
    stream, no cohort, no SESSION) and the queue is plain
    (``storage._plain``): True when served, False (before anything changed)
    for the ordinary ``serve``.  With one claimer the deal is what there is,
    up to its COUNT, which is what ``claim_next`` takes."""
    waiters = blocking.by_queue.get(queue)
    if waiters is None or len(<list>waiters) != 1 or queue in blocking.workers or queue in blocking.cohorts:
        return False
    plain = plain_module.twin
    w = (<list>waiters)[0]
    wait = w.wait
    conn = w.conn
    if plain is None or conn.closed or wait.cohort or wait.holder is not None:
        return False
    server = blocking.server
    store = server.store
    journal = store.journal
    mark = journal.mark()
    now = server.now_ms()
    jobs = plain.claim_next(store, queue, now, wait.count, now + wait.lease_ms, wait.consumer)
    if jobs is None:
        return False
    if jobs:
        ticket = journal.settled_since(mark, server.now_ms())
        blocking.cancel(w)
        conn.unblock(job_replies(jobs), ticket)
    if queue in blocking.by_queue or queue in blocking.workers:
        blocking._arm(queue)
    return True
