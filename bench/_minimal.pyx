# cython: language_level=3
"""The minimal queue of ``bench/floor.py`` (``MiniQueue``) compiled, with
its state in C fields: the same work, the same replies, as Cython classes.
``leaseq bench floor --queue`` runs it beside the Python one, to show what
compiling a request path whose data are C fields buys on uvloop
(docs/performance.md, "The floor under a job").  A benchmark's instrument,
not part of the daemon.
"""

import os
from collections import deque

import hiredis

cdef dict QUEUES = {}
cdef long long LAST_ID = 0
cdef set WOKEN = set()                 # queues with parked claims and ready jobs, served at the turn's end
cdef object LOOP = None


def set_loop(loop) -> None:
    global LOOP
    LOOP = loop


cdef inline bytes _bulk(bytes value):
    return b"$%d\r\n%s\r\n" % (len(value), value)


cdef inline long long _next_id():
    global LAST_ID
    LAST_ID += 1
    return LAST_ID


cdef class Job:
    cdef bytes id, payload

    def __cinit__(self, bytes jid, bytes payload):
        self.id = jid
        self.payload = payload


cdef class Queue:
    cdef object ready                  # jobs, oldest first
    cdef dict leased                   # lease token -> job
    cdef object waiters                # (MiniQueue, count, TimerHandle) of parked claims, in order

    def __cinit__(self):
        self.ready = deque()
        self.leased = {}
        self.waiters = deque()


cdef class MiniQueue:
    """An asyncio protocol (uvloop calls these methods by name)."""
    cdef object transport, reader, pending
    cdef bint parked
    cdef list out

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.reader = hiredis.Reader()
        self.pending = deque()
        self.parked = False
        self.out = []

    def connection_lost(self, exc) -> None:
        cdef Queue q
        for q in QUEUES.values():
            for conn, _count, timer in q.waiters:
                if conn is self:
                    timer.cancel()
            q.waiters = deque(w for w in q.waiters if w[0] is not self)

    def eof_received(self):
        return False

    def pause_writing(self) -> None:
        pass

    def resume_writing(self) -> None:
        pass

    def data_received(self, data) -> None:
        self.reader.feed(data)
        try:
            while True:
                command = self.reader.gets()
                if command is False:
                    break
                self.pending.append(command)
        except hiredis.ProtocolError:  # an inline command (the readiness check's PING)
            self.reader = hiredis.Reader()
            self.pending.append([b"PING"])
        self.run()

    cdef void run(self):
        while self.pending and not self.parked:
            self.execute(self.pending.popleft())
        if self.out:
            self.transport.write(b"".join(self.out))
            self.out = []

    cdef bytes claim(self, Queue q, long count):
        cdef list parts = []
        cdef Job job
        cdef bytes token
        while q.ready and len(parts) < count:
            job = q.ready.popleft()
            token = b"%s-%d" % (job.id, _next_id())
            q.leased[token] = job
            parts.append(b"*6\r\n$2\r\nid\r\n" + _bulk(job.id) + b"$7\r\npayload\r\n" + _bulk(job.payload)
                         + b"$5\r\nlease\r\n" + _bulk(token))
        return b"*%d\r\n" % len(parts) + b"".join(parts)

    cdef void execute(self, list args):
        cdef bytes name = (<bytes>args[0]).lower()
        cdef Queue q
        cdef Job job
        cdef Py_ssize_t i
        cdef long count, acked
        if name == b"qpush":
            q = QUEUES[args[1]]
            job = Job(b"%d" % _next_id(), args[2])
            q.ready.append(job)
            if q.waiters:
                if not WOKEN:
                    LOOP.call_soon(serve_woken)
                WOKEN.add(q)
            self.out.append(_bulk(job.id))
        elif name == b"qclaim":
            q = QUEUES[args[1]]
            count, block = 1, None
            for i in range(3, len(args) - 1, 2):
                option = (<bytes>args[i]).lower()
                if option == b"count":
                    count = int(args[i + 1])
                elif option == b"block":
                    block = int(args[i + 1])
            if q.ready or block is None:
                self.out.append(self.claim(q, count))
                return
            self.parked = True
            q.waiters.append((self, count, LOOP.call_later(block / 1000.0, self.timed_out, q)))
        elif name == b"qack":
            q = QUEUES[args[1]]
            acked = 0
            for i in range(2, len(args)):
                if q.leased.pop(args[i], None) is not None:
                    acked += 1
            self.out.append(b":%d\r\n" % acked)
        elif name == b"qcreate":
            if args[1] not in QUEUES:
                QUEUES[args[1]] = Queue()
            self.out.append(b"+OK\r\n")
        elif name == b"qdrop":
            QUEUES.pop(args[1], None)
            self.out.append(b"+OK\r\n")
        elif name == b"qinfo":
            q = QUEUES[args[1]]
            self.out.append(b"*6\r\n$5\r\nready\r\n:%d\r\n$7\r\ndelayed\r\n:0\r\n$9\r\nin_flight\r\n:%d\r\n"
                            % (len(q.ready), len(q.leased)))
        elif name == b"info":
            self.out.append(_bulk(b"# Server\r\nprocess_id:%d\r\n" % os.getpid()))
        else:
            self.out.append(b"+PONG\r\n")

    def timed_out(self, Queue q) -> None:
        q.waiters = deque(w for w in q.waiters if w[0] is not self)
        self.answer(b"*-1\r\n")

    cdef void answer(self, bytes data):
        self.parked = False
        self.out.append(data)
        self.run()


def serve_woken() -> None:
    global WOKEN
    cdef set woken = WOKEN
    cdef Queue q
    cdef MiniQueue conn
    WOKEN = set()
    for q in woken:
        while q.ready and q.waiters:
            conn, count, timer = q.waiters.popleft()
            timer.cancel()
            conn.answer(conn.claim(q, count))
