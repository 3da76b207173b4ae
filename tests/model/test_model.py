"""Model-based test: hypothesis drives the real daemon and the reference model
(tests/model/reference.py) with the same commands and compares every reply.

One daemon per example, started with ``LEASEQ_ENABLE_DEBUG_COMMAND=yes``,
``LEASEQ_LEASE_DURABILITY=fsync`` and a small ``LEASEQ_SNAPSHOT_MIN_BYTES`` (so
that restarts load snapshots too, besides the restart that takes one with
BGSAVE first); its clock is frozen (``DEBUG CLOCK FREEZE``)
and only moves by ``DEBUG CLOCK ADVANCE``, so the daemon is deterministic and
the model exact.  The queue is created with ``DURABILITY fsync`` and BACKOFF
jitter 0, so every replied change survives SIGKILL and a restart leaves the
model unchanged (except that the next job id may jump after a SIGKILL).
Some examples give the queue a DEADLETTER queue (created with it, so that
its QINFO can be read from the start); claims may be SESSION claims on a
second connection, which a rule ends with RESET or by closing it.

The number of steps run over all examples is printed in the terminal summary.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections import Counter

import pytest
import redis
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, \
    run_state_machine_as_test

from harness import Daemon

from .reference import CANCELLED, DEAD, READY, WAITING, RefJob, RefQueue

Q = "model"
LEASE = 1000                       # the queue's LEASE and the usual claim LEASE
ADVANCES = [0, 1, 999, 1000, 1001, 5000]
MAX_RESTARTS = 2                   # per example: restarts cost a daemon start
BOGUS_TOKENS = [b"ffff.1.1", b"1.0.0", b"nothex", b"0.1.1"]
TOKEN_RE = re.compile(rb"^([0-9a-f]+)\.([0-9a-f]+)\.([0-9a-f]+)$")
DLQ = "model-dlq"
ENV = {"LEASEQ_ENABLE_DEBUG_COMMAND": "yes", "LEASEQ_LEASE_DURABILITY": "fsync",
       "LEASEQ_SNAPSHOT_MIN_BYTES": "4096"}
KEYS = st.one_of(st.none(), st.none(), st.tuples(st.sampled_from([b"k1", b"k2"]),
                                                 st.sampled_from([None, b"queued", b"active", b"exists"]),
                                                 st.booleans()))         # REPLACE
GROUPS = st.sampled_from([None, None, b"", b"a", b"b"])

STEPS = 0                          # rules run, over every example of the run
EXAMPLES = 0
RESTARTS = {"kill": 0, "term": 0, "snapshot": 0}
EVENTS: Counter = Counter()         # what the steps exercised, printed with the step count


def seen(what: str) -> None:
    EVENTS[what] += 1
    event(what)


payloads = st.binary(max_size=6)
priorities = st.integers(0, 9)
errors_ = st.sampled_from([None, None, b"", b"boom", b"timeout after 3 s", "\u00e9chec".encode()])


def claim_view(job: RefJob) -> dict:
    """What QCLAIM answers for a job (docs/semantics.md §3.3), without the token."""
    m = {b"id": job.id, b"payload": job.payload, b"deadline": job.deadline, b"deliveries": job.deliveries,
         b"priority": job.priority, b"enqueued_at": job.enqueued_at}
    return m | optional_view(job)


def optional_view(job: RefJob) -> dict:
    """The fields QCLAIM, QGET and QPEEK add when a job has them."""
    m = {}
    if job.group:
        m[b"group"] = job.group
    if job.key is not None:
        m[b"key"] = job.key
    if job.last_error is not None:
        m[b"last_error"] = job.last_error
    if job.origin is not None:
        source, src_id, deliveries, reason, parent = job.origin
        m |= {b"dead_letter_from": source, b"dead_letter_src_id": src_id,
              b"dead_letter_deliveries": deliveries, b"dead_letter_reason": reason.encode()}
        if parent is not None:
            m[b"dead_letter_parent"] = [parent[0], parent[1]]
    return m


def result_view(m: RefQueue, jid: int) -> dict | None:
    """QGET of a job gone from the queue: its result while kept (§3.4), else nil."""
    kept = m.results.get(jid)
    if kept is None or kept[1] is None:
        return None
    return {b"id": jid, b"state": b"completed", b"result": kept[1], b"result_until": kept[0]}


def inspect_view(job: RefJob) -> dict:
    """What QGET / QPEEK answer for a job (docs/semantics.md, Replies)."""
    m = {b"id": job.id, b"state": job.state.encode(), b"payload": job.payload, b"priority": job.priority,
         b"enqueued_at": job.enqueued_at, b"visible_at": job.visible_at, b"deliveries": job.deliveries}
    if job.token is not None and job.deadline:
        m[b"deadline"] = job.deadline
        m[b"consumer"] = job.consumer
    if job.max_deliveries:
        m[b"maxdeliveries"] = job.max_deliveries
    if job.dead_reason is not None:
        m[b"dead_reason"] = job.dead_reason.encode()
    if job.retain_until:
        m[b"retained_until"] = job.retain_until
    if job.state == WAITING:
        m[b"waiting_for"] = [x for pid in sorted(job.waiting_for) for x in (Q.encode(), pid)]
    return m | optional_view(job)


class LeaseqMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        global EXAMPLES
        EXAMPLES += 1
        self.base = tempfile.mkdtemp(prefix="leaseq-model-")
        self.daemon = Daemon(os.path.join(self.base, "data"), env=ENV)
        self.daemon.start()
        self.r = self.daemon.client(protocol=3)
        self.model: RefQueue | None = None
        self.queues: dict[bytes, RefQueue] = {}    # name -> model: the queue and its DEADLETTER queue
        self.session = None                        # the connection of SESSION claims, when open
        self.session_tokens: list[bytes] = []
        self.all_tokens: list[bytes] = []
        self.lease_seq = 0             # leases granted since the daemon's last start
        self.restarts = 0

    def teardown(self) -> None:
        try:
            self.r.close()
            if self.session is not None:
                self.session.close()
        finally:
            self.daemon.kill()
            shutil.rmtree(self.base, ignore_errors=True)

    # -- helpers ------------------------------------------------------------------------

    def cmd(self, *args):
        return self.r.execute_command(*args)

    def step(self, rule_name: str) -> None:
        global STEPS
        STEPS += 1
        seen("rule: " + rule_name)

    def draw_tokens(self, data) -> list[bytes]:
        live = self.model.live_tokens()
        choices = []
        if live:
            choices += [st.sampled_from(live)] * 3
        if self.all_tokens:
            choices.append(st.sampled_from(self.all_tokens))
        choices.append(st.sampled_from(BOGUS_TOKENS))
        tokens = data.draw(st.lists(st.one_of(*choices), min_size=1, max_size=3), label="tokens")
        for t in tokens:
            job = self.model.job_for_token(t)
            if job is not None:
                seen("token: live, lease expired, not claimed again" if job.state == READY else "token: live")
            else:
                seen("token: stale" if t in self.model.issued else "token: never issued")
        return tokens

    # -- set-up -------------------------------------------------------------------------

    @initialize(maxdeliveries=st.sampled_from([0, 1, 2, 3]),
                backoff=st.sampled_from([(0, 1.0), (700, 1.0), (500, 2.0)]),
                retain_dead=st.sampled_from([0, 2500, 604_800_000]), deadletter=st.booleans(),
                result_ttl=st.sampled_from([3_600_000, 0, 2500]))
    def create_queue(self, maxdeliveries, backoff, retain_dead, deadletter, result_ttl):
        self.step("create_queue")
        # FREEZE at an explicit moment a second ahead: a bare "DEBUG CLOCK FREEZE" on a running
        # clock reads the clock twice (commands/debug.py) and fails with "the clock only moves
        # forward" when a millisecond ticks in between (about 1 call in 300)
        running = self.cmd("DEBUG", "CLOCK")
        assert running[b"frozen"] == 0
        assert self.cmd("DEBUG", "CLOCK", "FREEZE", running[b"now"] + 1000) == b"OK"
        clock = self.cmd("DEBUG", "CLOCK")
        assert clock[b"frozen"] == 1 and clock[b"now"] == running[b"now"] + 1000, clock
        self.config = {b"lease": LEASE, b"maxdeliveries": maxdeliveries, b"backoff_base": backoff[0],
                       b"backoff_exponent": repr(float(backoff[1])).encode(), b"backoff_jitter": 0,
                       b"retain_dead": retain_dead, b"deadletter": DLQ.encode() if deadletter else None,
                       b"durability": b"fsync", b"result_ttl": result_ttl}
        dlq = None
        if deadletter:
            assert self.cmd("QCREATE", DLQ, "DURABILITY", "fsync") == b"OK"
            dlq = RefQueue(clock[b"now"], name=DLQ.encode())
            self.queues[DLQ.encode()] = dlq
        reply = self.cmd("QCREATE", Q, "LEASE", LEASE, "MAXDELIVERIES", maxdeliveries,
                         "BACKOFF", backoff[0], repr(float(backoff[1])), 0, "RETAIN-DEAD", retain_dead,
                         "DURABILITY", "fsync", "RESULT-TTL", result_ttl, *(["DEADLETTER", DLQ] if deadletter else []))
        assert reply == b"OK"
        self.model = RefQueue(clock[b"now"], lease=LEASE, maxdeliveries=maxdeliveries,
                              backoff=(backoff[0], float(backoff[1]), 0), retain_dead=retain_dead,
                              name=Q.encode(), deadletter=dlq, result_ttl=result_ttl)
        self.queues[Q.encode()] = self.model
        seen("queue: with a DEADLETTER queue" if deadletter else "queue: dead jobs stay in it")

    # -- producing ------------------------------------------------------------------------

    def when_args(self, when) -> tuple[list, dict]:
        if when is None:
            return [], {}
        kind, value = when
        if kind == "DELAY":
            return ["DELAY", value], {"delay": value}
        at = self.model.now + value
        return ["AT", at], {"at": at}

    @rule(payload=payloads, priority=priorities,
          when=st.one_of(st.none(), st.tuples(st.just("DELAY"), st.sampled_from([0, 1, 1000, 2500])),
                         st.tuples(st.just("AT"), st.sampled_from([-1000, 0, 1, 1000]))),
          maxd=st.sampled_from([0, 0, 0, 1, 2]), key=KEYS, group=GROUPS)
    def push(self, payload, priority, when, maxd, key, group):
        self.step("push")
        args, kw = self.when_args(when)
        if maxd:
            args += ["MAXDELIVERIES", maxd]
        if group is not None:
            args += ["GROUP", group]
            kw["group"] = group
            seen("push: GROUP" + (' ""' if group == b"" else ""))
        if key is not None:
            args += ["KEY", key[0]] + ([] if key[1] is None else ["WHILE", key[1]]) + (["REPLACE"] if key[2] else [])
        jid = self.cmd("QPUSH", Q, payload, "PRIORITY", priority, *args)
        assert isinstance(jid, int), jid
        if key is None:
            self.model.push([jid], [payload], priority, max_deliveries=maxd, **kw)
            return
        duplicates = self.model.duplicates
        replaced = self.model.push_keyed(jid, payload, priority, key[0], key[1] or b"queued", replace=key[2],
                                         max_deliveries=maxd, **kw)
        seen(f"push: KEY WHILE {(key[1] or b'queued').decode()}, "
             + ("a duplicate" if self.model.duplicates > duplicates else "a new job")
             + (", REPLACE" + (" replaced the holder" if replaced else "") if key[2] else ""))

    @rule(batch=st.lists(payloads, min_size=1, max_size=4), priority=priorities,
          when=st.one_of(st.none(), st.tuples(st.just("DELAY"), st.sampled_from([0, 999, 1000]))),
          maxd=st.sampled_from([0, 0, 1, 2]), data=st.data())
    def pushmany(self, batch, priority, when, maxd, data):
        self.step("pushmany")
        args, kw = self.when_args(when)
        if maxd:
            args += ["MAXDELIVERIES", maxd]
        groups = data.draw(st.one_of(st.none(), st.lists(st.sampled_from([b"", b"a", b"b"]), min_size=len(batch),
                                                          max_size=len(batch))), label="groups")
        if groups is not None:
            args += ["GROUPS", *groups]
            seen("pushmany: GROUPS")
        ids = self.cmd("QPUSHMANY", Q, len(batch), *batch, "PRIORITY", priority, *args)
        assert isinstance(ids, list) and all(isinstance(i, int) for i in ids), ids
        if groups is None:
            self.model.push(ids, batch, priority, max_deliveries=maxd, **kw)
        else:
            for jid, payload, group in zip(ids, batch, groups):
                self.model.push([jid], [payload], priority, max_deliveries=maxd, group=group, **kw)

    @precondition(lambda self: self.model is not None and self.model.deadletter is None)
    @rule(payload=payloads, data=st.data(), onfail=st.sampled_from([None, None, "run", "fail"]),
          delay=st.sampled_from([None, None, 1000]))
    def push_after(self, payload, data, onfail, delay):
        """QPUSH ... AFTER 1 q id: a job that waits for another (docs/semantics.md
        §3.10); only where dead jobs stay in the queue, so that the order in
        which a death's children die changes no id."""
        self.step("push_after")
        known = sorted(set(self.model.jobs) | set(self.model.removed[-3:])) or [1]
        parent = data.draw(st.sampled_from(known), label="parent")
        args = ["AFTER", 1, Q, parent] + (["ONFAIL", onfail] if onfail else []) + (["DELAY", delay] if delay else [])
        jid = self.cmd("QPUSH", Q, payload, *args)
        state = self.model.jobs[parent].state if parent in self.model.jobs else "gone"
        self.model.push([jid], [payload], 5, delay=delay, after=[parent], onfail_run=onfail == "run")
        seen(f"push AFTER: parent {state}" + (f", ONFAIL {onfail}" if onfail else ""))

    # -- flow control --------------------------------------------------------------------

    @rule(rate=st.sampled_from([None, (0, 0), (1, 1000), (2, 1000), (3, 2500)]),
          concurrency=st.sampled_from([None, 0, 1, 2]), gc=st.sampled_from([None, 0, 1, 2]),
          grate=st.sampled_from([None, (0, 0), (1, 1000), (2, 2500)]))
    def alter_flow(self, rate, concurrency, gc, grate):
        """QALTER with RATE, CONCURRENCY, GROUP-CONCURRENCY, GROUP-RATE (0: off)."""
        self.step("alter_flow")
        args = []
        if rate is not None:
            args += ["RATE", *rate] if rate[0] else ["RATE", "OFF"]
            self.config[b"rate"], self.config[b"rate_ms"] = rate
        if concurrency is not None:
            args += ["CONCURRENCY", concurrency]
            self.config[b"concurrency"] = concurrency
        if gc is not None:
            args += ["GROUP-CONCURRENCY", gc]
            self.config[b"group_concurrency"] = gc
        if grate is not None:
            args += ["GROUP-RATE", *grate] if grate[0] else ["GROUP-RATE", 0]
            self.config[b"group_rate"], self.config[b"group_rate_ms"] = grate
        if not args:
            return
        assert self.cmd("QALTER", Q, *args) == b"OK"
        self.model.fold()
        self.model.set_rules(rate=rate, concurrency=concurrency, group_concurrency=gc, group_rate=grate)
        seen("flow: " + " ".join(str(a) for a in args[::2] if isinstance(a, str) and a.isupper()))

    @rule(pause=st.booleans(), group=st.sampled_from([None, None, b"", b"a", b"b"]))
    def pause(self, pause, group):
        """QPAUSE / QRESUME of the queue or of one group."""
        self.step("pause")
        args = [] if group is None else ["GROUP", group]
        assert self.cmd("QPAUSE" if pause else "QRESUME", Q, *args) == b"OK"
        self.model.fold()
        if group is None:
            self.model.paused = pause
            self.config[b"paused"] = int(pause)
        elif pause:
            self.model.paused_groups.add(group)
        else:
            self.model.paused_groups.discard(group)
        self.config[b"paused_groups"] = len(self.model.paused_groups)
        seen(f"flow: {'QPAUSE' if pause else 'QRESUME'}" + (" GROUP" if group is not None else ""))

    # -- claiming ---------------------------------------------------------------------------

    @rule(count=st.integers(1, 5), lease=st.sampled_from([None, LEASE, LEASE, 50, 2000]),
          consumer=st.sampled_from([b"w1", b"w2"]), session=st.sampled_from([False, False, True]))
    def claim(self, count, lease, consumer, session):
        self.step("claim")
        args = ["COUNT", count] + ([] if lease is None else ["LEASE", lease])
        if session:
            if self.session is None:
                self.session = self.daemon.client(protocol=3)
            reply = self.session.execute_command("QCLAIM", Q, consumer, *args, "SESSION")
        else:
            reply = self.cmd("QCLAIM", Q, consumer, *args)
        dead_before = self.model.dead_lettered
        jobs = self.model.claim(count, lease, consumer)
        seen("claim: got jobs" if jobs else "claim: got none")
        if self.model.dead_lettered > dead_before:
            seen("claim: dead-lettered at MAXDELIVERIES+1")
        if any(j.deliveries > 1 for j in jobs):
            seen("claim: a job delivered again")
        assert isinstance(reply, list), reply
        got = [{k: v for k, v in j.items() if k != b"lease"} for j in reply]
        want = [claim_view(j) for j in jobs]
        assert got == want, f"QCLAIM COUNT {count}: daemon {got}\nmodel {want}"
        tokens = [j[b"lease"] for j in reply]
        for job, token in zip(jobs, tokens):
            m = TOKEN_RE.match(token)
            assert m, f"token {token!r} is not <id>.<epoch>.<n> in hex"
            assert int(m.group(1), 16) == job.id, f"token {token!r} does not name job {job.id}"
            # docs/semantics.md: the boot epoch grows by one at every start; the lease number
            # counts the leases granted since that start, from 1
            self.lease_seq += 1
            assert (int(m.group(2), 16), int(m.group(3), 16)) == (1 + self.restarts, self.lease_seq), \
                f"token {token!r}: expected epoch {1 + self.restarts:x}, lease number {self.lease_seq:x}"
        self.model.bind_tokens(jobs, tokens)
        self.all_tokens += tokens
        if session:
            self.session_tokens += tokens
            seen("claim: SESSION")

    @precondition(lambda self: self.session is not None)
    @rule(how=st.sampled_from(["RESET", "close"]))
    def end_session(self, how):
        """The connection of the SESSION claims sends RESET or closes: the jobs
        still under its leases go back to ready (docs/semantics.md §3.3)."""
        self.step("end_session")
        live = self.model.live_tokens()
        seen(f"session: ended by {how}, " + ("leases released" if set(self.session_tokens) & set(live)
                                              else "nothing held any more"))
        if how == "RESET":
            assert self.session.execute_command("RESET") == b"RESET"
        self.session.close()
        self.session = None
        if how == "close":
            self.wait_for_clients(1)
        self.model.release_session(self.session_tokens)
        self.session_tokens = []

    def wait_for_clients(self, n: int) -> None:
        """Until the daemon has seen the other connections close (a condition,
        bounded: the close is noticed on the daemon's next loop turn)."""
        deadline = time.monotonic() + 10
        while self.cmd("INFO", "clients")["connected_clients"] != n:
            assert time.monotonic() < deadline, "the daemon did not notice a closed connection"
            time.sleep(0.005)

    @precondition(lambda self: self.model is not None and any(
        j.state == DEAD or j.origin is not None for q in self.queues.values() for j in q.jobs.values()))
    @rule(data=st.data())
    def redrive(self, data):
        """QREDRIVE on the queue (its dead jobs back in place) or on its
        DEADLETTER queue (its jobs back to the queue as new jobs)."""
        self.step("redrive")
        name = data.draw(st.sampled_from(sorted(self.queues)), label="queue")
        got = self.cmd("QREDRIVE", name)
        want = self.queues[name].redrive(self.queues)
        seen(f"redrive: {'the DEADLETTER queue' if name == DLQ.encode() else 'the queue'}, "
             + ("moved jobs" if want else "nothing to move"))
        assert got == want, f"QREDRIVE {name}: daemon {got}, model {want}"

    # -- completing -------------------------------------------------------------------------

    @precondition(lambda self: self.all_tokens)
    @rule(data=st.data(), result=st.sampled_from([None, None, b"", b"done", b"\xff\x00"]))
    def ack(self, data, result):
        self.step("ack")
        tokens = self.draw_tokens(data)
        if result is not None:
            tokens = tokens[:1]                 # RESULT goes with one token
            seen("ack: with a RESULT")
        got = self.cmd("QACK", Q, *tokens, *(["RESULT", result] if result is not None else []))
        want = self.model.ack(tokens, result)
        assert got == want, f"QACK {tokens} RESULT {result!r}: daemon {got}, model {want}"

    @rule(data=st.data())
    def cancel(self, data):
        """QCANCEL of jobs in any state, gone ones and unknown ids."""
        self.step("cancel")
        known = sorted(self.model.jobs) + self.model.removed[-3:] + [999_999]
        ids = data.draw(st.lists(st.sampled_from(known), min_size=1, max_size=3), label="ids")
        states = {self.model.jobs[i].state for i in ids if i in self.model.jobs}
        got = self.cmd("QCANCEL", Q, *ids)
        want = self.model.cancel(ids)
        seen("cancel: " + (", ".join(sorted(states)) or "gone or unknown ids"))
        assert got == want, f"QCANCEL {ids}: daemon {got}, model {want}"

    @precondition(lambda self: self.all_tokens)
    @rule(data=st.data(), delay=st.sampled_from([None, 0, 0, 1, 1000, 2500, "DEAD"]), error=errors_)
    def nack(self, data, delay, error):
        self.step("nack")
        tokens = self.draw_tokens(data)
        args = []
        if delay == "DEAD":
            args.append("DEAD")
        elif delay is not None:
            args += ["DELAY", delay]
        if error is not None:
            args += ["ERROR", error]
        got = self.cmd("QNACK", Q, *tokens, *args)
        want = self.model.nack(tokens, delay=None if delay == "DEAD" else delay, error=error,
                               dead=delay == "DEAD")
        assert got == want, f"QNACK {tokens} {args}: daemon {got}, model {want}"

    @precondition(lambda self: self.all_tokens)
    @rule(data=st.data(), lease=st.sampled_from([None, None, 50, 1000, 3000]))
    def extend(self, data, lease):
        self.step("extend")
        tokens = self.draw_tokens(data)
        args = [] if lease is None else ["LEASE", lease]
        got = self.cmd("QEXTEND", Q, *tokens, *args)
        want = self.model.extend(tokens, lease)
        assert got == want, f"QEXTEND {tokens} {args}: daemon {got}, model {want}"

    # -- time and restarts ---------------------------------------------------------------------

    @rule(ms=st.sampled_from(ADVANCES))
    def advance(self, ms):
        self.step("advance")
        assert self.cmd("DEBUG", "CLOCK", "ADVANCE", ms) == b"OK"
        self.model.advance(ms)
        assert self.cmd("DEBUG", "CLOCK")[b"now"] == self.model.now

    def moments(self) -> list[int]:
        """Future moments at which the queue changes by time: lease deadlines,
        delayed jobs' visible_at, dead jobs' end of retention."""
        m = self.model
        return sorted({t for t in m.upcoming() if t > m.now})

    @precondition(lambda self: self.model is not None and self.moments())
    @rule(data=st.data(), off=st.sampled_from([-1, 0, 0, 1]))
    def advance_to_moment(self, data, off):
        """Move the clock to just before, at or just after a deadline, so every
        boundary (deadline <= now is expired; visible_at <= now is ready) is hit."""
        self.step("advance_to_moment")
        moment = data.draw(st.sampled_from(self.moments()), label="moment")
        ms = moment + off - self.model.now
        assert ms >= 0
        assert self.cmd("DEBUG", "CLOCK", "ADVANCE", ms) == b"OK"
        self.model.advance(ms)
        assert self.cmd("DEBUG", "CLOCK")[b"now"] == self.model.now

    def bgsave(self) -> None:
        """BGSAVE, and wait until the snapshot is written (a condition, bounded).
        An automatic snapshot (the small SNAPSHOT_MIN_BYTES) may be running,
        started at the end of the last command's turn: BGSAVE would be
        refused, as Redis refuses it, so wait for that one to end first.  No
        other can start meanwhile: only a turn that writes the log starts one."""
        deadline = time.monotonic() + 30
        while True:
            info = self.cmd("INFO", "persistence")
            if not info["snapshot_in_progress"]:
                break
            assert time.monotonic() < deadline, f"an automatic snapshot did not finish: {info}"
            time.sleep(0.005)
        taken = info["snapshots_taken"]
        reply = self.cmd("BGSAVE")
        assert reply == b"Background saving started", reply
        while True:
            info = self.cmd("INFO", "persistence")
            if info["snapshots_taken"] > taken and not info["snapshot_in_progress"]:
                assert info["last_snapshot_status"] == "ok", info
                return
            assert time.monotonic() < deadline, f"BGSAVE did not finish: {info}"
            time.sleep(0.005)

    @precondition(lambda self: self.restarts < MAX_RESTARTS)
    @rule(how=st.sampled_from(["kill", "term", "snapshot"]))
    def restart(self, how):
        """SIGKILL or SIGTERM, then a restart on the same directory and port;
        "snapshot": BGSAVE, then SIGKILL, so the restart loads the snapshot
        (and any log after it)."""
        self.step("restart")
        self.restarts += 1
        self.lease_seq = 0
        RESTARTS[how] += 1
        if how == "snapshot":
            self.bgsave()
        self.r.close()
        crashed = how != "term"
        if crashed:
            # SIGKILL before the SESSION connection closes: a close the daemon
            # saw first would release its leases, a race the model cannot know
            self.daemon.kill()        # SESSION leases stay: their deadlines cover them
        else:
            assert self.daemon.stop() == 0, self.daemon.log()[-2000:]
            self.model.release_session(self.session_tokens)   # a graceful shutdown releases them
        if self.session is not None:
            self.session.close()
            self.session = None
        self.session_tokens = []
        self.daemon.restart()
        self.r = self.daemon.client(protocol=3)
        for q in self.queues.values():
            q.restarted(crashed=crashed)
        clock = self.cmd("DEBUG", "CLOCK")
        assert clock[b"frozen"] == 1 and clock[b"now"] == self.model.now, \
            f"clock after restart {clock}, model now {self.model.now}"
        if self.cmd("INFO", "persistence")["last_snapshot_bytes"]:
            seen("restart: loaded a snapshot (and the log after it)")
        if self.model.rate[0] or self.model.group_rate[0]:
            # a restart rebuilds the rate windows only from the claims logged after the newest
            # snapshot, which may be an automatic one the test cannot see: let them run out
            span = max(self.model.rate[1], self.model.group_rate[1])
            assert self.cmd("DEBUG", "CLOCK", "ADVANCE", span) == b"OK"
            self.model.advance(span)
            self.model.forget_windows()
            seen("restart: rate windows let run out")
        info = self.cmd("QINFO", Q)
        for k, v in self.config.items():
            assert info[k] == v, f"QINFO {k!r} after restart: {info[k]!r}, created with {v!r}"
        for name, q in self.queues.items():
            q_info = info if name == Q.encode() else self.cmd("QINFO", name)
            q.resync_duplicates(q_info[b"duplicates"])
            next_id = q_info[b"next_id"]
            if crashed:
                q.resync_next_id(next_id)
            else:
                assert next_id == q.next_id, f"{name} next_id after SIGTERM {next_id}, model {q.next_id}"

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def state_matches(self):
        if self.model is None:
            return
        clock = self.cmd("DEBUG", "CLOCK")
        assert clock[b"now"] == self.model.now and clock[b"frozen"] == 1, clock
        for name, m in self.queues.items():
            self.queue_matches(name, m)

    def queue_matches(self, name: bytes, m: RefQueue) -> None:
        m.fold()
        jobs = sorted(m.jobs)
        gone = m.removed[-5:]
        p = self.r.pipeline(transaction=False)
        p.execute_command("QINFO", name)
        p.execute_command("QLEN", name)
        p.execute_command("QPEEK", name, "COUNT", 5)
        for jid in jobs + gone:
            p.execute_command("QGET", name, jid)
        info, qlen, peek, *got = p.execute()

        c = m.counts()
        want = {b"ready": c[READY], b"delayed": c["delayed"], b"in_flight": c["in_flight"], b"dead": c["dead"],
                b"completed": 0, b"cancelled": c[CANCELLED], b"pushed": m.pushed, b"acked": m.acked, b"nacked": m.nacked,
                b"lease_expired": m.lease_expired, b"dead_lettered": m.dead_lettered, b"duplicates": m.duplicates,
                b"oldest_ready_age_ms": m.oldest_ready_age(), b"consumers_blocked": 0, b"waiting": c[WAITING],
                b"throttled": m.throttled(), b"groups": m.group_count()}
        if m.next_id is not None:
            want[b"next_id"] = m.next_id
        have = {k: info[k] for k in want}
        assert have == want, f"QINFO {name}: daemon {have}\nmodel  {want}"
        assert qlen == c[READY], f"QLEN {name} {qlen}, model {c[READY]}"
        want_peek = [inspect_view(j) for j in m.ready_order()[:5]]
        assert peek == want_peek, f"QPEEK {name} COUNT 5: daemon {peek}\nmodel  {want_peek}"
        for jid, reply in zip(jobs + gone, got):
            want_job = inspect_view(m.jobs[jid]) if jid in m.jobs else result_view(m, jid)
            assert reply == want_job, f"QGET {name} {jid}: daemon {reply}\nmodel  {want_job}"
        p = self.r.pipeline(transaction=False)
        for jid in jobs + gone:
            p.execute_command("QRESULT", name, jid)
        for jid, reply in zip(jobs + gone, p.execute(raise_on_error=False)):
            have = str(reply) if isinstance(reply, redis.ResponseError) else reply
            want_result = m.result(jid)
            assert have == want_result, f"QRESULT {name} {jid}: daemon {have!r}, model {want_result!r}"


class _Summary:
    """Prints the step count in pytest's terminal summary (shown with -q too)."""

    def __init__(self, text: str, events: dict) -> None:
        self.text = text
        self.events = events

    def pytest_terminal_summary(self, terminalreporter):
        terminalreporter.write_line(self.text)
        for what, n in sorted(self.events.items()):
            terminalreporter.write_line(f"    {n:6d}  {what}")


# a passing run takes well under the suite's 300 s; a failing one shrinks (restarting daemons) for
# up to hypothesis's own five minutes, which must not be cut short by pytest-timeout
@pytest.mark.timeout(900)
def test_daemon_matches_reference_model(request):
    global STEPS, EXAMPLES
    STEPS = EXAMPLES = 0
    RESTARTS.update(kill=0, term=0, snapshot=0)
    EVENTS.clear()
    outcome = "without divergence"
    try:
        run_state_machine_as_test(
            LeaseqMachine,
            settings=settings(max_examples=100, stateful_step_count=40, deadline=None, database=None,
                              suppress_health_check=[HealthCheck.too_slow]))
    except BaseException:
        outcome = "run (a divergence was found; see the failure above)"
        raise
    finally:
        text = (f"leaseq model test: {STEPS} hypothesis steps {outcome} "
                f"({EXAMPLES} examples, restarts: {RESTARTS['kill']} SIGKILL, {RESTARTS['term']} SIGTERM, "
                f"{RESTARTS['snapshot']} BGSAVE then SIGKILL)")
        print(text)
        request.config.pluginmanager.register(_Summary(text, dict(EVENTS)), "leaseq-model-summary")
