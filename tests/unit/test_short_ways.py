"""The short ways of the plain transitions (storage/plain.py) against
``Store``'s transitions: generated command sequences, run through
``dispatch.execute`` once with the short ways (``plain.SHORT``) and once
without, on two stores that start alike, give the same reply bytes, the
same tickets, the same counters and command statistics, the same log
records and the same store; and those records, replayed (as recovery and
a replica replay them) with the short ways and without, make the same
store.  The sequences mix plain commands with every
way of not being plain (options, a queue's features, jobs with rare
fields, MULTI, a full memory, a failed log, bad arguments, names in any
case, leases that ran out), so both sides of each check are run, in
whichever flavour is loaded."""

from __future__ import annotations

import re

import pytest

from core import T0, Client, Core
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_state import digest

from leaseq.commands.claims import ClaimWait
from leaseq.daemon.holdings import Session
from leaseq.daemon.dispatch import execute
from leaseq.daemon.resp import encode
from leaseq.storage import plain as plain_module
from leaseq.storage.recovery import Replayer
from leaseq.storage.store import Store

QUEUES = {
    b"mem": [b"DURABILITY", b"memory"],
    b"disk": [b"DURABILITY", b"fsync", b"RETAIN-COMPLETED", b"60000"],
    b"short": [b"MAXLEN", b"3", b"DURABILITY", b"async"],
    b"paced": [b"CONCURRENCY", b"2", b"MAXDELIVERIES", b"2", b"LEASE", b"50"],
    b"window": [b"WINDOW", b"20", b"DURABILITY", b"memory"],
    b"sync": [b"DURABILITY", b"fsync", b"LEASE", b"100", b"RESULT-TTL", b"100"],   # plain; leases and results run out
}
NAMES = list(QUEUES) + [b"fresh"]          # "fresh": not created, so a push makes it

queue = st.sampled_from(NAMES)
case = st.sampled_from([bytes.upper, bytes.lower, lambda b: b[:2].lower() + b[2:].upper()])
payload = st.sampled_from([b"x", b"", b"y" * 40, b"z" * 300])       # 300: over proto-max-payload below
claim_options = st.sampled_from([
    [], [b"COUNT", b"3"], [b"count", b"2", b"BLOCK", b"100"], [b"BLOCK", b"0"], [b"LEASE", b"20"],
    [b"COUNT", b"0"], [b"COUNT"], [b"BLOCK", b"-1"], [b"SESSION"], [b"COUNT", b"2", b"COUNT", b"2"], [b"NOPE"],
    [b"COMPACT"], [b"count", b"3", b"compact"], [b"COMPACT", b"BLOCK", b"100"], [b"SESSION", b"COMPACT"],
    [b"COMPACT", b"COMPACT"]])
consumer = st.sampled_from([b"w1", b"w2", b"", b"c" * 300])
token_pick = st.one_of(st.integers(0, 40), st.sampled_from([b"garbage", b"", b"1.1.999", b"RESULT", b"result",
                                                                  b"rEsUlT", b"a.1.1", b"results"]))

ops = st.one_of(
    st.tuples(st.just("push"), case, queue, payload,
              st.sampled_from([[], [b"PRIORITY", b"7"], [b"GROUP", b"g"], [b"KEY", b"k"], [b"DELAY", b"50"],
                               [b"MAXDELIVERIES", b"1"], [b"EXPIRE", b"40"]])),
    st.tuples(st.just("claim"), case, queue, consumer, claim_options),
    st.tuples(st.just("ack"), case, queue, st.lists(token_pick, min_size=0, max_size=4), st.booleans()),
    st.tuples(st.just("nack"), case, queue, st.lists(token_pick, min_size=1, max_size=2),
              st.sampled_from([[b"DELAY", b"0"], [b"DELAY", b"30"]])),
    st.tuples(st.just("cycle"), case, queue),
    st.tuples(st.just("clock"), st.integers(1, 120)),
    st.tuples(st.just("turn")),
    st.tuples(st.just("state"), st.sampled_from(["multi", "exec", "discard", "oom", "disk", "loading", "well"])),
)


def _args(op, tokens: dict) -> list[bytes]:
    kind = op[0]
    if kind == "push":
        _, name, q, p, options = op
        return [name(b"qpush"), q, p] + options
    if kind == "claim":
        _, name, q, who, options = op
        return [name(b"qclaim"), q, who] + options
    _, name, q, picks, more = op
    mine = tokens.get(q, [])              # the tokens claims of this queue were given, the latest last
    chosen = [p if isinstance(p, bytes) else mine[-1 - p % len(mine)] if mine else b"0.0.0" for p in picks]
    if kind == "nack":
        return [name(b"qnack"), q] + chosen + more
    return [name(b"qack"), q] + chosen + ([b"RESULT", b"done"] if more else [])


class Side:
    """One store and one client, with the short ways or without them."""

    def __init__(self, short: bool) -> None:
        self.short = short
        self.core = Core(max_payload=256)
        self.client = Client(self.core, holder=Session(None))       # SESSION claims hold their leases
        for name, options in QUEUES.items():
            self.execute([b"QCREATE", name] + options)

    def execute(self, args: list):
        saved, plain_module.SHORT = plain_module.SHORT, self.short
        try:
            reply, ticket = execute(self.client, args)
        finally:
            plain_module.SHORT = saved
        if isinstance(reply, ClaimWait):
            shown = ("parked", reply.queue.name, reply.consumer, reply.count, reply.lease_ms, reply.timeout_ms,
                     reply.cohort, reply.compact)
        else:
            shown = encode(reply, False)
        woken = sorted(q.name for q in self.core.store.take_woken())     # the queues blocked claimers would be served from
        return shown, ticket, self.client.last_command, woken

    def state(self, what: str) -> None:
        core = self.core
        if what in ("multi", "exec", "discard"):
            self.execute([what.upper().encode()])
        elif what == "oom":
            core.oom = True
        elif what == "disk":
            core.disk_error = OSError(28, "No space left on device")
        elif what == "loading":
            core.loading = True
        else:
            core.oom = core.loading = False
            core.disk_error = None

    def summary(self) -> dict:
        core = self.core
        log = core.store.journal.log
        log.flush()
        return {"stats": {name: getattr(core.stats, name) for name in type(core.stats).__slots__},
                "commands": {name: sum(h.counts) for name, h in core.metrics.commands.items() if sum(h.counts)},
                "records": log.records(),
                "store": digest(core.store),
                "results": {q.name: sorted((jid, e.until, e.value, e.reason) for jid, e in q.results.entries.items())
                            for q in core.store.queues.values()}}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ops, min_size=1, max_size=40))
def test_the_short_ways_and_the_stores_transitions_do_the_same(sequence):
    _same_on_both_sides(sequence)


def _life(q: bytes, *push_options: bytes):
    return [("push", bytes.upper, q, b"job", list(push_options))]


def _claim(q: bytes, *options: bytes):
    return [("claim", bytes.upper, q, b"w1", list(options))]


SCENARIOS = {
    "a job past its EXPIRE is dead-lettered, not claimed": _life(b"mem", b"EXPIRE", b"40") + [("clock", 50)]
    + _claim(b"mem"),
    "a job past its MAXDELIVERIES is dead-lettered": _life(b"sync", b"MAXDELIVERIES", b"1") + _claim(b"sync")
    + [("nack", bytes.upper, b"sync", [0], [b"DELAY", b"0"])] + _claim(b"sync"),
    "a delayed job comes due": _life(b"mem", b"DELAY", b"50") + _claim(b"mem") + [("clock", 60)] + _claim(b"mem"),
    "a lease runs out and its job is claimed again; the old token is stale":
        _life(b"sync") + _claim(b"sync") + [("turn",), ("clock", 150)] + _claim(b"sync")
        + [("ack", bytes.upper, b"sync", [1, 0], False), ("turn",)] + _claim(b"sync"),
    "an ack of a job whose lease ran out, back in ready, its token still good":
        _life(b"sync") + _claim(b"sync") + [("clock", 150)] + _life(b"sync", b"PRIORITY", b"7")
        + _claim(b"sync") + [("ack", bytes.upper, b"sync", [1], False)] + _claim(b"sync", b"COUNT", b"5"),
    "a durable ack no claim can see before the lease's end": _life(b"sync") + _life(b"sync") + _claim(b"sync")
        + [("turn",), ("ack", bytes.upper, b"sync", [0], False)] + _claim(b"sync") + [("turn",)] + _claim(b"sync"),
    "a kept result runs out at a claim": _life(b"sync") + _claim(b"sync")
        + [("ack", bytes.upper, b"sync", [0], True), ("clock", 150)] + _life(b"sync") + _claim(b"sync"),
    "a job with a dedupe key": _life(b"mem", b"KEY", b"k") + _claim(b"mem") + [("ack", bytes.upper, b"mem", [0], False)],
    "compact claims of plain jobs and of jobs with rare fields": _life(b"mem") + _life(b"mem", b"KEY", b"k")
        + _life(b"mem", b"GROUP", b"g") + _claim(b"mem", b"COUNT", b"3", b"COMPACT")
        + [("ack", bytes.upper, b"mem", [0, 1, 2], False)],
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_each_way_of_not_being_plain(name):
    """Sequences that reach each check of the plain transitions; a random
    sequence reaches some of them only now and then."""
    _same_on_both_sides(SCENARIOS[name])


def _same_on_both_sides(sequence):
    sides = [Side(short=True), Side(short=False)]
    tokens: dict = {}
    now = T0
    for op in _spread(sequence):
        if op[0] == "clock":
            now += op[1]
            for side in sides:
                side.core.at(now)
            continue
        if op[0] == "state":
            for side in sides:
                side.state(op[1])
            continue
        if op[0] == "turn":          # the end of a turn: everything written and fsynced
            for side in sides:
                side.core.store.journal.log.flush_and_sync()
            continue
        args = _args(op, tokens)
        got = [side.execute(list(args)) for side in sides]
        assert got[0] == got[1], args
        reply = got[0][0]
        if op[0] == "claim" and isinstance(reply, bytes):
            tokens.setdefault(op[2], []).extend(_tokens(reply))
    summary = sides[0].summary()
    assert summary == sides[1].summary()
    assert _replayed(summary["records"], short=True) == _replayed(summary["records"], short=False)


def _replayed(records: list, short: bool) -> dict:
    """The store a replay of ``records`` makes (recovery's, a replica's),
    taking the short ways or not."""
    store = Store()
    replay = Replayer(store).apply
    saved, plain_module.SHORT = plain_module.SHORT, short
    try:
        for rtype, body in records:
            replay(rtype, body)
    finally:
        plain_module.SHORT = saved
    return digest(store)


def _spread(sequence):
    """A "cycle" is a job's whole life on one queue: push, claim, ack of
    the token it was given."""
    for op in sequence:
        if op[0] == "cycle":
            _, name, q = op
            yield "push", name, q, b"job", []
            yield "claim", name, q, b"w1", []
            yield "ack", name, q, [0], False
        else:
            yield op


def _tokens(reply: bytes) -> list[bytes]:
    """The lease tokens in an encoded claim reply (RESP2: each after "lease";
    with COMPACT, a job's third value, the one of its values shaped as a token)."""
    parts = reply.split(b"\r\n")
    return [part for part in parts if TOKEN.fullmatch(part)]


TOKEN = re.compile(rb"[0-9a-f]+\.[0-9a-f]+\.[0-9a-f]+")
